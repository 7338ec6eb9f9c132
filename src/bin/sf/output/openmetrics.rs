//! Metric families as text: OpenMetrics 1.0 for a Prometheus server that asks for it, or
//! the Prometheus text format 0.0.4 that node_exporter's textfile collector and older
//! scrapers read. One list of families, two spellings: OpenMetrics names a counter's
//! family without `_total` and knows info, stateset and gaugehistogram types and units;
//! the older format spells those as counters named `_total`, gauges and histograms.

use std::fmt::Write as _;

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

/// Which text format to write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavor {
    OpenMetrics,
    /// The Prometheus text format 0.0.4.
    Prometheus,
}

impl Flavor {
    pub fn content_type(self) -> &'static str {
        match self {
            Flavor::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
            Flavor::Prometheus => "text/plain; version=0.0.4; charset=utf-8",
        }
    }
}

/// The families as text, families without samples left out.
pub fn render(families: &[Family], flavor: Flavor) -> String {
    let mut out = String::new();
    for f in families.iter().filter(|f| !f.samples.is_empty()) {
        let (type_name, kind) = match (flavor, f.kind) {
            (Flavor::OpenMetrics, Kind::Gauge) => (f.name.to_string(), "gauge"),
            (Flavor::OpenMetrics, Kind::Counter) => (f.name.to_string(), "counter"),
            (Flavor::OpenMetrics, Kind::Info) => (f.name.to_string(), "info"),
            (Flavor::OpenMetrics, Kind::StateSet) => (f.name.to_string(), "stateset"),
            (Flavor::OpenMetrics, Kind::GaugeHistogram) => (f.name.to_string(), "gaugehistogram"),
            (Flavor::Prometheus, Kind::Gauge | Kind::StateSet) => (f.name.to_string(), "gauge"),
            (Flavor::Prometheus, Kind::Counter) => (format!("{}_total", f.name), "counter"),
            (Flavor::Prometheus, Kind::Info) => (format!("{}_info", f.name), "gauge"),
            (Flavor::Prometheus, Kind::GaugeHistogram) => (f.name.to_string(), "histogram"),
        };
        let _ = writeln!(out, "# TYPE {type_name} {kind}");
        if flavor == Flavor::OpenMetrics && !f.unit.is_empty() {
            let _ = writeln!(out, "# UNIT {type_name} {}", f.unit);
        }
        let _ = writeln!(out, "# HELP {type_name} {}", escape_help(f.help));
        for s in &f.samples {
            let suffix = match (flavor, s.suffix) {
                (Flavor::Prometheus, "_gcount") => "_count",
                (Flavor::Prometheus, "_gsum") => "_sum",
                (_, suffix) => suffix,
            };
            out.push_str(f.name);
            out.push_str(suffix);
            if !s.labels.is_empty() {
                out.push('{');
                for (i, (k, v)) in s.labels.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    let _ = write!(out, "{k}=\"{}\"", escape_label(v));
                }
                out.push('}');
            }
            let _ = writeln!(out, " {}", number(s.value));
        }
    }
    if flavor == Flavor::OpenMetrics {
        out.push_str("# EOF\n");
    }
    out
}

/// A value as both formats spell it: integers without a fraction, `+Inf`, `NaN`.
fn number(v: f64) -> String {
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

fn escape_label(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

fn escape_help(v: &str) -> String {
    v.replace('\\', "\\\\").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn families() -> Vec<Family> {
        let mut dropped = Family::new("sf_events_dropped", Kind::Counter, "", "Events dropped");
        dropped.push(&[("rank", "0".into())], 3.0);
        let mut state = Family::new("sf_rank_state", Kind::StateSet, "", "Writer state");
        state.push_states(&[("rank", "0".into())], &["live", "dead"], "live");
        let mut step = Family::new("sf_step_window_seconds", Kind::GaugeHistogram, "seconds", "Step times");
        step.push_histogram(&[("rank", "a\"b".into())], &[0.1, 1.0], &[0.05, 0.5, 2.0]);
        vec![dropped, state, step, Family::new("sf_empty", Kind::Gauge, "", "nothing")]
    }

    #[test]
    fn openmetrics_spelling() {
        let text = render(&families(), Flavor::OpenMetrics);
        let expected = "\
# TYPE sf_events_dropped counter
# HELP sf_events_dropped Events dropped
sf_events_dropped_total{rank=\"0\"} 3
# TYPE sf_rank_state stateset
# HELP sf_rank_state Writer state
sf_rank_state{rank=\"0\",sf_rank_state=\"live\"} 1
sf_rank_state{rank=\"0\",sf_rank_state=\"dead\"} 0
# TYPE sf_step_window_seconds gaugehistogram
# UNIT sf_step_window_seconds seconds
# HELP sf_step_window_seconds Step times
sf_step_window_seconds_bucket{rank=\"a\\\"b\",le=\"0.1\"} 1
sf_step_window_seconds_bucket{rank=\"a\\\"b\",le=\"1\"} 2
sf_step_window_seconds_bucket{rank=\"a\\\"b\",le=\"+Inf\"} 3
sf_step_window_seconds_gcount{rank=\"a\\\"b\"} 3
sf_step_window_seconds_gsum{rank=\"a\\\"b\"} 2.55
# EOF
";
        assert_eq!(text, expected);
    }

    #[test]
    fn prometheus_text_spelling() {
        let text = render(&families(), Flavor::Prometheus);
        assert!(
            text.contains("# TYPE sf_events_dropped_total counter\nsf_events_dropped_total{rank=\"0\"} 3\n")
                || text.contains("# TYPE sf_events_dropped_total counter\n# HELP")
        );
        assert!(text.contains("# TYPE sf_rank_state gauge"));
        assert!(text.contains("# TYPE sf_step_window_seconds histogram"));
        assert!(text.contains("sf_step_window_seconds_count{rank=\"a\\\"b\"} 3"));
        assert!(!text.contains("# EOF") && !text.contains("# UNIT"));
    }
}
