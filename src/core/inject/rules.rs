//! The `SF_INJECT` grammar: rules separated by `;`, each `ACTION:key=value,...`.
//!
//! ```text
//! delay:rank=3,op=allreduce,seq=10-50,ms=120,jitter_ms=20
//! hang:rank=5,op=allreduce,seq=40
//! fail:rank=1|2,op=broadcast,result=ncclSystemError,prob=0.5,seed=7
//! ```
//! Keys: rank (N or N|N|...), op, comm (an id as `sf dump` prints it, or `world`),
//! seq (N or N-M), step (N or N-M), stage, ms, jitter_ms, result, prob, seed.

use crate::core::log::nccl_op::{result_name, NcclOp};
use crate::core::log::records::InjectAction;
use crate::core::record::notice::{clip, echo};

/// An inclusive range of sequence or step numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    pub first: u64,
    pub last: u64,
}

impl Span {
    pub fn contains(&self, n: u64) -> bool {
        (self.first..=self.last).contains(&n)
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CommSelector {
    /// The communicator spanning the whole job (nranks == WORLD_SIZE).
    World,
    Id(u64),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Rule {
    pub action: InjectAction,
    pub ranks: Option<Vec<i32>>,
    pub op: Option<NcclOp>,
    pub comm: Option<CommSelector>,
    pub seq: Option<Span>,
    pub step: Option<Span>,
    pub stage: Option<String>,
    pub delay_ms: f64,
    pub jitter_ms: f64,
    pub result: i32,
    pub prob: f64,
    pub seed: u64,
}

/// Parses the whole variable; any error rejects all of it, because a fault matrix run
/// with some of its faults silently missing would score the wrong experiment.
pub fn parse(text: &str) -> Result<Vec<Rule>, String> {
    text.split(';')
        .map(str::trim)
        .filter(|r| !r.is_empty())
        .enumerate()
        .map(|(i, r)| {
            parse_rule(r).map_err(|e| format!("rule {} {}: {}", i + 1, echo(r.as_bytes()), clip(e.as_bytes()).0))
        })
        .collect()
}

fn parse_rule(text: &str) -> Result<Rule, String> {
    let (action, rest) = text.split_once(':').unwrap_or((text, ""));
    let action = match action.trim() {
        "delay" => InjectAction::Delay,
        "hang" => InjectAction::Hang,
        "fail" => InjectAction::Fail,
        other => return Err(format!("unknown action `{other}`; use delay, hang or fail")),
    };
    let mut rule = Rule {
        action,
        ranks: None,
        op: None,
        comm: None,
        seq: None,
        step: None,
        stage: None,
        delay_ms: 0.0,
        jitter_ms: 0.0,
        result: 3,
        prob: 1.0,
        seed: 0,
    };
    let mut has_ms = false;
    for pair in rest.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').ok_or_else(|| format!("`{pair}` is not key=value"))?;
        let (key, value) = (key.trim(), value.trim());
        match key {
            "rank" => rule.ranks = Some(value.split('|').map(|r| number(key, r)).collect::<Result<_, _>>()?),
            "op" => rule.op = Some(collective_or_p2p(value)?),
            "comm" => rule.comm = Some(comm(value)?),
            "seq" => rule.seq = Some(span(key, value)?),
            "step" => rule.step = Some(span(key, value)?),
            "stage" if !value.is_empty() => rule.stage = Some(value.to_string()),
            "ms" => {
                rule.delay_ms = millis(key, value)?;
                has_ms = true;
            }
            "jitter_ms" => rule.jitter_ms = millis(key, value)?,
            "result" => rule.result = result_code(value)?,
            "prob" => {
                rule.prob = value.parse().ok().filter(|p| (0.0..=1.0).contains(p)).ok_or("prob must be in 0..1")?
            }
            "seed" => rule.seed = number(key, value)?,
            _ => return Err(format!("unknown key `{key}`")),
        }
    }
    match action {
        InjectAction::Delay if !has_ms => Err("delay needs ms=".into()),
        _ if rule.delay_ms + rule.jitter_ms > MAX_DELAY_MS => {
            Err(format!("ms + jitter_ms is over the cap of {MAX_DELAY_MS} ms (1 h); use hang for longer"))
        }
        InjectAction::Fail if rule.result == 0 => Err("fail needs an error result, not ncclSuccess".into()),
        _ => Ok(rule),
    }
}

fn number<T: std::str::FromStr>(key: &str, value: &str) -> Result<T, String> {
    value.trim().parse().map_err(|_| format!("{key}={value} is not a number"))
}

/// The longest delay (`ms` + `jitter_ms`) a rule may ask for: an hour. A longer wait is a
/// hang, which `hang` says honestly, and an absurd one would overflow the nanoseconds.
pub const MAX_DELAY_MS: f64 = 3_600_000.0;

fn millis(key: &str, value: &str) -> Result<f64, String> {
    let ms = value
        .parse::<f64>()
        .ok()
        .filter(|v| v.is_finite() && *v >= 0.0)
        .ok_or(format!("{key}={value} is not a duration"))?;
    if ms > MAX_DELAY_MS {
        return Err(format!("{key}={value} is over the cap of {MAX_DELAY_MS} ms (1 h); use hang for longer"));
    }
    Ok(ms)
}

fn span(key: &str, value: &str) -> Result<Span, String> {
    let (first, last) = value.split_once('-').unwrap_or((value, value));
    let span = Span { first: number(key, first)?, last: number(key, last)? };
    if span.first > span.last {
        return Err(format!("{key}={value} is an empty range"));
    }
    Ok(span)
}

fn collective_or_p2p(value: &str) -> Result<NcclOp, String> {
    NcclOp::ALL
        .into_iter()
        .find(|op| (op.is_collective() || op.is_p2p()) && op.name() == value && *op != NcclOp::Bcast)
        .ok_or_else(|| {
            let names: Vec<&str> = NcclOp::ALL
                .into_iter()
                .filter(|op| (op.is_collective() || op.is_p2p()) && *op != NcclOp::Bcast)
                .map(NcclOp::name)
                .collect();
            format!("op={value} is not one of {}", names.join(", "))
        })
}

fn comm(value: &str) -> Result<CommSelector, String> {
    if value == "world" {
        return Ok(CommSelector::World);
    }
    let id = match value.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => value.parse().ok(),
    };
    id.map(CommSelector::Id).ok_or(format!("comm={value} is neither `world` nor a communicator id"))
}

fn result_code(value: &str) -> Result<i32, String> {
    (0..=8)
        .find(|&code| result_name(code) == value)
        .or_else(|| value.parse().ok())
        .ok_or(format!("result={value} is not an ncclResult_t name such as ncclSystemError"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_issue_examples_parse() {
        let rules =
            parse("delay:rank=3,stage=data.next_wait,ms=120,step=10-50; hang:rank=5,op=allreduce,seq=40").unwrap();
        assert_eq!(rules.len(), 2);
        let delay = &rules[0];
        assert_eq!(
            (delay.action, delay.ranks.as_deref(), delay.delay_ms),
            (InjectAction::Delay, Some(&[3][..]), 120.0)
        );
        assert_eq!(delay.step, Some(Span { first: 10, last: 50 }));
        assert_eq!(delay.stage.as_deref(), Some("data.next_wait"));
        let hang = &rules[1];
        assert_eq!(
            (hang.action, hang.op, hang.seq),
            (InjectAction::Hang, Some(NcclOp::AllReduce), Some(Span { first: 40, last: 40 }))
        );
    }

    #[test]
    fn every_key() {
        let rule = &parse("fail:rank=1|5|7,op=recv,comm=0x00000000000000ff,seq=2-3,result=ncclSystemError,prob=0.25,seed=9,jitter_ms=1.5")
            .unwrap()[0];
        assert_eq!(rule.ranks.as_deref(), Some(&[1, 5, 7][..]));
        assert_eq!((rule.op, rule.comm.clone(), rule.result), (Some(NcclOp::Recv), Some(CommSelector::Id(255)), 2));
        assert_eq!((rule.prob, rule.seed, rule.jitter_ms), (0.25, 9, 1.5));
        assert_eq!(parse("hang:comm=world").unwrap()[0].comm, Some(CommSelector::World));
        assert_eq!(parse("fail:op=allgather").unwrap()[0].result, 3, "ncclInternalError by default");
        assert_eq!(
            parse("hang:op=gather_config").unwrap()[0].op,
            Some(NcclOp::GatherConfig),
            "2.32's entry points too"
        );
        assert_eq!(parse("fail:result=ncclTimeout").unwrap()[0].result, 8);
    }

    #[test]
    fn malformed_rules_are_explained() {
        for (text, needle) in [
            ("explode:rank=1", "unknown action"),
            ("delay:rank=1", "needs ms"),
            ("hang:rank=x", "rank=x"),
            ("hang:op=bcast", "op=bcast"),
            ("hang:seq=9-3", "empty range"),
            ("hang:colour=red", "unknown key"),
            ("fail:result=ncclSuccess", "error result"),
            ("delay:ms=-4", "ms=-4"),
            ("hang:prob=2", "prob"),
            ("hang:rank", "key=value"),
            ("hang:rank=1;delay:ms=oops", "rule 2"),
            ("delay:ms=inf", "ms=inf is not a duration"),
            ("delay:ms=NaN", "ms=NaN is not a duration"),
            ("delay:ms=1e300", "over the cap"),
            ("delay:ms=3600001", "over the cap"),
            ("delay:ms=3000000,jitter_ms=700000", "over the cap"),
        ] {
            let error = parse(text).unwrap_err();
            assert!(error.contains(needle), "{text}: {error}");
        }
        assert_eq!(parse(" ; ").unwrap(), vec![]);
        assert!(parse("delay:ms=3600000").is_ok(), "exactly one hour is allowed");
        let long = format!("delay:ms=\x1b[2J{}", "9".repeat(1000));
        let error = parse(&long).unwrap_err();
        assert!(error.len() < 400 && !error.contains('\x1b'), "{error}");
    }
}
