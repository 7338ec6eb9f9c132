//! L1's verdict on one rank's iteration times (ARGUS §6.1): the two detectors together
//! classify the series as stable, jitter, regression, or both.

use super::change_point::{regression, ChangePoint, ChangePointParams};
use super::jitter::{jitter_intervals, JitterInterval, JitterParams};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum L1Class {
    Stable,
    Jitter,
    Regression,
    Both,
}

#[derive(Clone, Debug, PartialEq)]
pub struct L1Report {
    pub jitter: Vec<JitterInterval>,
    pub regression: Option<ChangePoint>,
}

impl L1Report {
    pub fn class(&self) -> L1Class {
        match (self.jitter.is_empty(), self.regression.is_some()) {
            (true, false) => L1Class::Stable,
            (false, false) => L1Class::Jitter,
            (true, true) => L1Class::Regression,
            (false, true) => L1Class::Both,
        }
    }
}

pub fn level1(times: &[f64], jitter: &JitterParams, change: &ChangePointParams) -> L1Report {
    L1Report { jitter: jitter_intervals(times, jitter), regression: regression(times, change) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::slow::jitter::tests::noisy;

    #[test]
    fn classes() {
        let class = |t: &[f64]| level1(t, &JitterParams::default(), &ChangePointParams::default()).class();
        let mut t = noisy(8, 300, 100.0);
        assert_eq!(class(&t), L1Class::Stable);
        t[50] *= 3.0;
        assert_eq!(class(&t), L1Class::Jitter);
        let mut step = noisy(8, 300, 100.0);
        step[150..].iter_mut().for_each(|x| *x *= 1.2);
        assert_eq!(class(&step), L1Class::Regression);
        // A spike inside the slower segment: jitter found, and the step still is, because a
        // single 1.6x point in 150 keeps that side's CV under 0.1.
        step[250] *= 1.6;
        assert_eq!(class(&step), L1Class::Both);
    }
}
