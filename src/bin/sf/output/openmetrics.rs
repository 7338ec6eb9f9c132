//! Metric families as text: OpenMetrics 1.0 for a Prometheus server that asks for it, or
//! the Prometheus text format 0.0.4 that node_exporter's textfile collector and older
//! scrapers read. One list of families, two spellings: OpenMetrics names a counter's
//! family without `_total` and knows info, stateset and gaugehistogram types and units;
//! the older format spells those as counters named `_total`, gauges and histograms.

use std::fmt::Write as _;

use stagefrontier::report::metric_families::{number, Family, Kind};

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
