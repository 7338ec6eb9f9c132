//! `sf dump`'s output: records one at a time as they stream (a human line, or a JSON line
//! with the names its ids refer to), or the header.

use std::io::{self, Write};

use serde::Serialize;
use stagefrontier::core::log::nccl_op::{dtype_name, redop_name, result_name};
use stagefrontier::core::log::reader::Record;
use stagefrontier::core::log::records::{ProfProxy, RecordBody};
use stagefrontier::core::net::profiler::{algo_name, func_name, proto_name};
use stagefrontier::core::record::doors::Doors;

use super::human_records::record_line;
use crate::cli::Format;
use stagefrontier::report::dump::{HeaderReport, LogNames};
use stagefrontier::report::wall::WallClock;

/// Writes records as they come, in one format.
pub struct RecordWriter<'a, W: Write> {
    format: Format,
    out: W,
    names: &'a LogNames,
    clock: WallClock,
    base_mono_ns: u64,
}

impl<'a, W: Write> RecordWriter<'a, W> {
    /// Starts the output (the column titles of the human form).
    pub fn new(
        format: Format,
        mut out: W,
        names: &'a LogNames,
        clock: WallClock,
        base_mono_ns: u64,
    ) -> io::Result<RecordWriter<'a, W>> {
        if format == Format::Human {
            human_line!(
                out,
                "{:>8}  {:>12}  {:<24}  {:<12}  {:<21}  {:<18}  {:>8}  {:>12}  {:<10}  {:>14}  {:<6}  {:>12}  RESULT",
                "SEQ",
                "TIME_S",
                "WALL",
                "KIND",
                "OP",
                "COMM",
                "COMM_SEQ",
                "COUNT",
                "DTYPE",
                "BYTES",
                "REDOP",
                "DUR_US"
            )?;
        }
        Ok(RecordWriter { format, out, names, clock, base_mono_ns })
    }

    pub fn record(&mut self, record: &Record) -> io::Result<()> {
        match self.format {
            Format::Json => super::json::line(&mut self.out, &DumpLine::new(record, self.names)),
            Format::Human => {
                let wall = record.body.t_ns().map_or_else(|| "-".to_string(), |t| self.clock.rfc3339(t));
                let line = record_line(record, self.base_mono_ns, self.names);
                human_line!(self.out, "{}", with_wall_column(&line, &wall))
            }
        }
    }

    pub fn finish(mut self) -> io::Result<()> {
        self.out.flush()
    }
}

/// Every record line starts with SEQ and TIME_S; WALL goes after them.
fn with_wall_column(line: &str, wall: &str) -> String {
    let mut end = 0;
    for _ in 0..2 {
        end += line[end..].len() - line[end..].trim_start().len();
        end += line[end..].find(' ').unwrap_or(line.len() - end);
    }
    format!("{}  {wall:<24}{}", &line[..end], &line[end..])
}

/// `sf dump --header`.
pub fn header<W: Write>(format: Format, out: W, report: &HeaderReport) -> io::Result<()> {
    super::report(format, out, report, |out, r| {
        let h = &r.header;
        let live = &r.live;
        let lines = [
            ("file", r.file.clone()),
            ("format", format!("log format {}, record schema {}", h.format_version, h.schema)),
            (
                "rank",
                format!(
                    "{} of world {} (local rank {}, from {})",
                    h.global_rank, h.world_size, h.local_rank, h.identity_source
                ),
            ),
            ("host", format!("{} pid {}", h.host, h.pid)),
            ("job", h.job_id.clone()),
            ("clock", format!("{} at {:.0} ticks/s", h.clock_source, live.ticks_per_sec)),
            (
                "started",
                format!(
                    "{} (CLOCK_MONOTONIC {} ns, ticks {})",
                    r.start_wall.as_deref().unwrap_or("-"),
                    h.base_mono_ns,
                    h.base_ticks
                ),
            ),
            (
                "heartbeat",
                format!(
                    "CLOCK_MONOTONIC {} ns, wall {}",
                    live.heartbeat_mono_ns,
                    stagefrontier::report::wall::rfc3339_ms(live.heartbeat_wall_ns)
                ),
            ),
            ("writer", live.writer_state.map_or_else(|| "unknown".to_string(), |s| super::human::json_name(&s))),
            (
                "records",
                format!(
                    "{} committed, ring of {} slots, event ring of {}",
                    live.committed, h.slot_count, h.ring_capacity
                ),
            ),
            ("dropped", format!("{} events", live.dropped_events)),
            ("nccl", if live.nccl_version == 0 { "-".to_string() } else { live.nccl_version.to_string() }),
            (
                "polls",
                format!("{} ncclCommGetAsyncError polls that found no error (counted, not recorded)", live.nccl_polls),
            ),
            (
                "unnamed",
                format!(
                    "{} stage or value markers lost: the stage-name table ({} names) was full",
                    live.markers_unnamed,
                    stagefrontier::core::log::format::stage_names::SLOTS
                ),
            ),
            ("doors", live.doors.as_ref().map_or_else(|| "not recorded (an older library)".to_string(), doors_line)),
        ];
        for (key, value) in lines {
            human_line!(out, "{key:<10} {value}")?;
        }
        human_line!(out, "names      {} (stage and value names, by id)", r.names.len())?;
        for entry in &r.names {
            human_line!(out, "  {:>4}  {}", entry.id, entry.name)?;
        }
        Ok(())
    })
}

/// The open doors, then the injection variables that were set.
fn doors_line(d: &Doors) -> String {
    let open = if d.open.is_empty() { "none".to_string() } else { d.open.join(",") };
    let set: Vec<&str> = [
        (d.nvtx_injection_path_set, "NVTX_INJECTION64_PATH"),
        (d.cuda_injection_path_set, "CUDA_INJECTION64_PATH"),
        (d.nccl_profiler_plugin_set, "NCCL_PROFILER_PLUGIN"),
    ]
    .into_iter()
    .filter_map(|(set, name)| set.then_some(name))
    .collect();
    format!(
        "{open} (set: {})",
        if set.is_empty() { "none of the injection variables".to_string() } else { set.join(", ") }
    )
}

/// A record as its own serde form, plus the names its ids refer to, so a script need know
/// neither nccl.h's numbering nor the log's name table.
#[derive(Serialize)]
struct DumpLine<'a> {
    #[serde(flatten)]
    record: &'a Record,
    #[serde(flatten)]
    names: Resolved,
}

/// The resolved names of one record; only those its kind has are written.
#[derive(Default, Serialize)]
struct Resolved {
    #[serde(skip_serializing_if = "Option::is_none")]
    dtype_name: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    redop_name: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    result_name: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    func_name: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    algo_name: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    proto_name: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    unit_name: Option<&'static str>,
    /// The names of a step vector's or stage_device record's stages, in their order.
    #[serde(skip_serializing_if = "Option::is_none")]
    stage_names: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stage_name: Option<String>,
    /// A side value's name.
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<String>,
}

impl<'a> DumpLine<'a> {
    fn new(record: &'a Record, names: &LogNames) -> DumpLine<'a> {
        let resolved = match &record.body {
            RecordBody::NcclCall(c) => Resolved {
                dtype_name: Some(dtype_name(c.dtype)),
                redop_name: Some(redop_name(c.redop)),
                result_name: Some(result_name(c.result)),
                ..Resolved::default()
            },
            RecordBody::StepVector(v) => Resolved {
                stage_names: Some(v.stages().map(|(id, _)| names.stage(id)).collect()),
                ..Resolved::default()
            },
            RecordBody::StageDevice(d) => Resolved {
                stage_names: Some(d.stages().map(|(id, ..)| names.stage(id)).collect()),
                ..Resolved::default()
            },
            RecordBody::SideValue(v) => Resolved { name: Some(names.stage(v.name_id)), ..Resolved::default() },
            RecordBody::Injection(i) => {
                Resolved { stage_name: i.stage.map(|id| names.stage(id)), ..Resolved::default() }
            }
            RecordBody::ProfOp(p) => Resolved {
                func_name: Some(func_name(p.func)),
                dtype_name: Some(if p.dtype < 0 { "?" } else { dtype_name(p.dtype as i32) }),
                algo_name: Some(algo_name(p.algo)),
                proto_name: Some(proto_name(p.proto)),
                ..Resolved::default()
            },
            RecordBody::ProfProxy(p) => Resolved {
                unit_name: Some(match p.unit {
                    ProfProxy::OP => "proxy_op",
                    ProfProxy::STEP => "proxy_step",
                    ProfProxy::KERNEL_CH => "kernel_ch",
                    _ => "?",
                }),
                ..Resolved::default()
            },
            _ => Resolved::default(),
        };
        DumpLine { record, names: resolved }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stagefrontier::core::log::records::{Drops, SideValue};

    #[test]
    fn names_only_where_a_kind_has_ids() {
        let names = LogNames::new(vec![Some("data".into()), None, Some("loss".into())]);
        let drops = Record {
            seq: 9,
            body: RecordBody::Drops(Drops { t_ns: 1, dropped_total: 2, ring_capacity: 16, profiler_dropped: 1 }),
        };
        let json = serde_json::to_string(&DumpLine::new(&drops, &names)).unwrap();
        assert_eq!(
            json,
            r#"{"seq":9,"kind":"drops","t_ns":1,"dropped_total":2,"ring_capacity":16,"profiler_dropped":1}"#
        );
        let value = Record { seq: 3, body: RecordBody::SideValue(SideValue { step: 4, name_id: 2, value: 0.5 }) };
        let json = serde_json::to_string(&DumpLine::new(&value, &names)).unwrap();
        assert_eq!(json, r#"{"seq":3,"kind":"side_value","step":4,"name_id":2,"value":0.5,"name":"loss"}"#);
        assert_eq!(names.stage(1), "stage#1");
    }

    #[test]
    fn the_wall_column_follows_seq_and_time() {
        assert_eq!(
            with_wall_column("       3      1.000000  nccl_call  x", "W"),
            format!("       3      1.000000  {:<24}  nccl_call  x", "W")
        );
    }
}
