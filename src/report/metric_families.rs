//! The exporter's metrics as values: families of samples with OpenMetrics types, built by
//! the exporter's questions and spelled as text by `sf`'s OpenMetrics output.

/// What a family's samples mean (OpenMetrics types).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Gauge,
    /// Samples carry the `_total` suffix.
    Counter,
    /// One sample per entity, value 1, the identity in its labels; samples end in `_info`.
    Info,
    /// One sample per state, 1 for the state the entity is in, 0 for the others; the state
    /// is the label named like the family.
    StateSet,
    /// A distribution over a window (not a running count): `_bucket`, `_gcount`, `_gsum`.
    GaugeHistogram,
}

#[derive(Clone, Debug)]
pub struct Family {
    /// The family name, OpenMetrics style (a counter's without `_total`, an info's without
    /// `_info`); it ends in the unit when there is one.
    pub name: &'static str,
    pub kind: Kind,
    /// `seconds`, `bytes`, `ratio`, ... or empty.
    pub unit: &'static str,
    pub help: &'static str,
    pub samples: Vec<Sample>,
}

#[derive(Clone, Debug)]
pub struct Sample {
    /// Appended to the family name: `_total`, `_info`, `_bucket`, `_gcount`, `_gsum` or "".
    pub suffix: &'static str,
    pub labels: Vec<(String, String)>,
    pub value: f64,
}

impl Family {
    pub fn new(name: &'static str, kind: Kind, unit: &'static str, help: &'static str) -> Family {
        Family { name, kind, unit, help, samples: Vec::new() }
    }

    /// Adds the sample of a gauge or counter (the counter's suffix is added).
    pub fn push(&mut self, labels: &[(&str, String)], value: f64) {
        let suffix = match self.kind {
            Kind::Counter => "_total",
            Kind::Info => "_info",
            _ => "",
        };
        self.samples.push(Sample { suffix, labels: own(labels), value });
    }

    /// Adds a stateset's samples: one per state, 1 for `current`.
    pub fn push_states(&mut self, labels: &[(&str, String)], states: &[&str], current: &str) {
        for state in states {
            let mut l = own(labels);
            l.push((self.name.to_string(), state.to_string()));
            self.samples.push(Sample { suffix: "", labels: l, value: f64::from(u8::from(*state == current)) });
        }
    }

    /// Adds a window histogram of `values` over the upper bounds `bounds` (ascending).
    pub fn push_histogram(&mut self, labels: &[(&str, String)], bounds: &[f64], values: &[f64]) {
        for &le in bounds.iter().chain(&[f64::INFINITY]) {
            let mut l = own(labels);
            l.push(("le".to_string(), number(le)));
            let count = values.iter().filter(|&&v| v <= le).count();
            self.samples.push(Sample { suffix: "_bucket", labels: l, value: count as f64 });
        }
        self.samples.push(Sample { suffix: "_gcount", labels: own(labels), value: values.len() as f64 });
        self.samples.push(Sample { suffix: "_gsum", labels: own(labels), value: values.iter().sum() });
    }
}

fn own(labels: &[(&str, String)]) -> Vec<(String, String)> {
    labels.iter().map(|(k, v)| (k.to_string(), v.clone())).collect()
}

/// A value as both formats spell it: integers without a fraction, `+Inf`, `NaN`.
pub fn number(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v == f64::INFINITY {
        "+Inf".into()
    } else if v == f64::NEG_INFINITY {
        "-Inf".into()
    } else if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}
