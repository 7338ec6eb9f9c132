//! The Chrome JSON trace-event format (the "JSON Object Format" Perfetto and
//! chrome://tracing read), written event by event: `{"traceEvents":[...]}` with complete
//! slices (`X`), counters (`C`), flow events (`s`/`t`/`f`) and metadata (`M`). Times are
//! microseconds from the trace's origin to a tenth (100 ns: finer than any NCCL call or
//! stage worth seeing, and a big job's trace is a tenth smaller than at nanoseconds).

use std::io::{self, BufWriter, Write};

use stagefrontier::core::log::safe_path;
use stagefrontier::report::trace::{self, FlowPhase, TraceOptions, TraceReport, TraceSink};
use stagefrontier::report::Failure;

pub struct TraceWriter<W: Write> {
    out: W,
    origin_ns: u64,
    events: u64,
}

impl<W: Write> TraceWriter<W> {
    pub fn new(mut out: W, origin_ns: u64) -> io::Result<TraceWriter<W>> {
        out.write_all(b"{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n")?;
        Ok(TraceWriter { out, origin_ns, events: 0 })
    }

    /// Starts an event: the separator, then `{"ph":"<ph>","pid":<pid>`. Events are not
    /// on lines of their own: a big job's trace is big enough without the newlines.
    fn begin(&mut self, ph: &str, pid: u32) -> io::Result<()> {
        if self.events > 0 {
            self.out.write_all(b",")?;
        }
        self.events += 1;
        write!(self.out, "{{\"ph\":\"{ph}\",\"pid\":{pid}")
    }

    fn ts(&mut self, key: &str, ns: u64) -> io::Result<()> {
        micros(&mut self.out, key, ns)
    }

    /// `,"key":"value"`, escaped.
    fn string(&mut self, key: &str, value: &str) -> io::Result<()> {
        self.out.write_all(b",")?;
        self.first_string(key, value)
    }

    /// `"key":"value"`, escaped: the first member of an object.
    fn first_string(&mut self, key: &str, value: &str) -> io::Result<()> {
        write!(self.out, "\"{key}\":")?;
        serde_json::to_writer(&mut self.out, value).map_err(io::Error::other)
    }

    /// Closes the trace; the events written and the writer.
    pub fn finish(mut self) -> io::Result<(u64, W)> {
        self.out.write_all(b"]}\n")?;
        self.out.flush()?;
        Ok((self.events, self.out))
    }
}

impl<W: Write> TraceSink for TraceWriter<W> {
    /// A rank's process: its name, its host as a label, and its place in the list.
    fn process(&mut self, pid: u32, name: &str, host: &str, sort_index: usize) -> io::Result<()> {
        self.begin("M", pid)?;
        self.out.write_all(b",\"name\":\"process_name\",\"args\":{")?;
        self.first_string("name", name)?;
        self.out.write_all(b"}}")?;
        self.begin("M", pid)?;
        self.out.write_all(b",\"name\":\"process_labels\",\"args\":{")?;
        self.first_string("labels", &format!("host {host}"))?;
        self.out.write_all(b"}}")?;
        self.begin("M", pid)?;
        write!(self.out, ",\"name\":\"process_sort_index\",\"args\":{{\"sort_index\":{sort_index}}}}}")
    }

    /// A track (thread) of a process, named.
    fn thread(&mut self, pid: u32, tid: u32, name: &str) -> io::Result<()> {
        self.begin("M", pid)?;
        write!(self.out, ",\"tid\":{tid},\"name\":\"thread_name\",\"args\":{{")?;
        self.first_string("name", name)?;
        self.out.write_all(b"}}")?;
        self.begin("M", pid)?;
        write!(self.out, ",\"tid\":{tid},\"name\":\"thread_sort_index\",\"args\":{{\"sort_index\":{tid}}}}}")
    }

    /// A complete slice from `ts_ns` (wall clock) lasting `dur_ns`.
    fn slice(
        &mut self,
        pid: u32,
        tid: u32,
        name: &str,
        ts_ns: u64,
        dur_ns: u64,
        args: &[(&str, u64)],
    ) -> io::Result<()> {
        self.begin("X", pid)?;
        write!(self.out, ",\"tid\":{tid}")?;
        // Both ends rounded, so slices that touch still touch.
        let begin = tenth(ts_ns.saturating_sub(self.origin_ns));
        let end = tenth(ts_ns.saturating_add(dur_ns).saturating_sub(self.origin_ns));
        self.ts("ts", begin)?;
        self.ts("dur", end - begin)?;
        self.string("name", name)?;
        if args.is_empty() {
            return self.out.write_all(b"}");
        }
        self.out.write_all(b",\"args\":{")?;
        for (i, (key, value)) in args.iter().enumerate() {
            write!(self.out, "{}\"{key}\":{value}", if i == 0 { "" } else { "," })?;
        }
        self.out.write_all(b"}}")
    }

    /// A counter sample: one series per value, drawn as a graph on the process.
    fn counter(&mut self, pid: u32, name: &str, ts_ns: u64, values: &[(&str, f64)]) -> io::Result<()> {
        self.begin("C", pid)?;
        self.ts("ts", tenth(ts_ns.saturating_sub(self.origin_ns)))?;
        self.string("name", name)?;
        self.out.write_all(b",\"args\":{")?;
        for (i, (key, value)) in values.iter().enumerate() {
            let value = if value.is_finite() { *value } else { 0.0 };
            write!(self.out, "{}\"{key}\":{value}", if i == 0 { "" } else { "," })?;
        }
        self.out.write_all(b"}}")
    }

    /// A thread-scoped instant with string arguments.
    fn instant(&mut self, pid: u32, tid: u32, name: &str, ts_ns: u64, args: &[(&str, &str)]) -> io::Result<()> {
        self.begin("i", pid)?;
        write!(self.out, ",\"tid\":{tid},\"s\":\"t\"")?;
        self.ts("ts", tenth(ts_ns.saturating_sub(self.origin_ns)))?;
        self.string("name", name)?;
        self.out.write_all(b",\"args\":{")?;
        for (i, (key, value)) in args.iter().enumerate() {
            if i > 0 {
                self.out.write_all(b",")?;
            }
            self.first_string(key, value)?;
        }
        self.out.write_all(b"}}")
    }

    /// One end or step of a flow arrow, bound to the slice that encloses it on its track.
    fn flow(&mut self, pid: u32, tid: u32, ts_ns: u64, id: u64, name: &str, phase: FlowPhase) -> io::Result<()> {
        let ph = match phase {
            FlowPhase::Start => "s",
            FlowPhase::Step => "t",
            FlowPhase::Finish => "f",
        };
        self.begin(ph, pid)?;
        write!(self.out, ",\"tid\":{tid}")?;
        self.ts("ts", tenth(ts_ns.saturating_sub(self.origin_ns)))?;
        write!(self.out, ",\"id\":{id},\"cat\":\"nccl\"")?;
        self.string("name", name)?;
        self.out.write_all(b",\"bp\":\"e\"}")
    }
}

/// `ns` rounded to the nearest 100 ns.
fn tenth(ns: u64) -> u64 {
    ns.saturating_add(50) / 100 * 100
}

/// `,"key":<ns, a multiple of 100, as microseconds>`, a decimal only when it has one.
fn micros(out: &mut impl Write, key: &str, ns: u64) -> io::Result<()> {
    match (ns / 1_000, ns % 1_000 / 100) {
        (us, 0) => write!(out, ",\"{key}\":{us}"),
        (us, tenths) => write!(out, ",\"{key}\":{us}.{tenths}"),
    }
}

/// `sf trace`: plans the trace, writes it to `options.output` event by event, and says
/// what it holds.
pub fn write_file(options: &TraceOptions) -> Result<TraceReport, Failure> {
    let plan = trace::plan(options)?;
    let fail = |e: io::Error| Failure::Message(format!("{}: cannot write: {e}", options.output.display()));
    // Made new beside its name and renamed onto it: never written through a link planted
    // at that name or on the way to it (core::log::safe_path).
    let (dir, name) = safe_path::output_file_dir(&options.output)
        .map_err(|e| Failure::Message(format!("{}: cannot write: {}", options.output.display(), e.message())))?;
    let new = dir.create_new(&name, 0o666).map_err(fail)?;
    let mut writer = TraceWriter::new(BufWriter::new(new.file()), plan.origin_ns).map_err(fail)?;
    trace::stream(&plan, options, &mut writer)?;
    let (events, out) = writer.finish().map_err(fail)?;
    let bytes = out.into_inner().map_err(|e| fail(e.into_error()))?.metadata().map_or(0, |m| m.len());
    new.commit().map_err(fail)?;
    Ok(TraceReport {
        file: options.output.display().to_string(),
        ranks: plan.ranks(),
        events,
        bytes,
        collectives: plan.collectives(),
    })
}

/// The line printed on success.
pub fn written_line(report: &TraceReport) -> String {
    format!(
        "{}: {} ranks, {} events, {:.1} MB; open it in ui.perfetto.dev or chrome://tracing",
        report.file,
        report.ranks,
        report.events,
        report.bytes as f64 / 1e6
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_are_json_with_microsecond_times() {
        let mut trace = TraceWriter::new(Vec::new(), 1_000).unwrap();
        trace.process(3, "node0 rank 3", "node0", 0).unwrap();
        trace.slice(3, 1, "step \"7\"", 2_500, 1_000_001, &[("step", 7)]).unwrap();
        trace.slice(3, 100, "allreduce", 3_000, 40, &[("seq", 9)]).unwrap();
        trace.counter(3, "qp", 1_000, &[("in_flight", 2.0), ("bad", f64::NAN)]).unwrap();
        trace.flow(3, 100, 3_000, 0xab, "allreduce", FlowPhase::Start).unwrap();
        let (events, bytes) = trace.finish().unwrap();
        let value: serde_json::Value = serde_json::from_slice(&bytes).expect("valid JSON");
        let list = value["traceEvents"].as_array().unwrap();
        assert_eq!((events, list.len()), (7, 7));
        assert_eq!(list[0]["args"]["name"], "node0 rank 3");
        assert_eq!(list[3]["name"], "step \"7\"");
        assert_eq!((list[3]["ts"].as_f64(), list[3]["dur"].as_f64()), (Some(1.5), Some(1000.0)));
        assert_eq!(list[4]["args"]["seq"], 9);
        assert_eq!(list[5]["args"]["bad"], 0.0);
        assert_eq!((list[6]["ph"].as_str(), list[6]["bp"].as_str()), (Some("s"), Some("e")));
    }
}
