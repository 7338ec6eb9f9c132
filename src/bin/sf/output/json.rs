//! JSON for scripts: `ls` as one object, `dump` as JSON Lines, one record per line.

use std::io::{self, Write};

use serde::Serialize;
use stagefrontier::core::comms::nccl_op::{dtype_name, redop_name, result_name};
use stagefrontier::core::log::reader::Record;
use stagefrontier::core::log::records::RecordBody;

use super::Output;
use crate::commands::dump::DumpReport;
use crate::commands::frontier::FrontierReport;
use crate::commands::hang::HangReport;
use crate::commands::ls::LsReport;

pub struct Json<W> {
    out: W,
}

impl<W: Write> Json<W> {
    pub fn new(out: W) -> Json<W> {
        Json { out }
    }
}

/// `value` as one line of JSON.
pub fn line<W: Write, T: Serialize + ?Sized>(out: &mut W, value: &T) -> io::Result<()> {
    serde_json::to_writer(&mut *out, value)?;
    writeln!(out)
}

/// A record as its own serde form, plus the names of an NCCL call's codes, so a script
/// need not know nccl.h's numbering.
#[derive(Serialize)]
struct DumpLine<'a> {
    #[serde(flatten)]
    record: &'a Record,
    #[serde(flatten)]
    names: Option<CallNames>,
}

#[derive(Serialize)]
struct CallNames {
    dtype_name: &'static str,
    redop_name: &'static str,
    result_name: &'static str,
}

impl<'a> DumpLine<'a> {
    fn new(record: &'a Record) -> DumpLine<'a> {
        let names = match &record.body {
            RecordBody::NcclCall(c) => Some(CallNames {
                dtype_name: dtype_name(c.dtype),
                redop_name: redop_name(c.redop),
                result_name: result_name(c.result),
            }),
            _ => None,
        };
        DumpLine { record, names }
    }
}

impl<W: Write> Output for Json<W> {
    fn ls(&mut self, report: &LsReport) -> io::Result<()> {
        line(&mut self.out, report)?;
        self.out.flush()
    }

    fn dump(&mut self, report: &DumpReport) -> io::Result<()> {
        for record in &report.records {
            line(&mut self.out, &DumpLine::new(record))?;
        }
        self.out.flush()
    }

    fn frontier(&mut self, report: &FrontierReport) -> io::Result<()> {
        line(&mut self.out, report)?;
        self.out.flush()
    }

    fn hang(&mut self, report: &HangReport) -> io::Result<()> {
        line(&mut self.out, report)?;
        self.out.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stagefrontier::core::log::records::Drops;

    #[test]
    fn only_calls_get_names() {
        let drops = Record { seq: 9, body: RecordBody::Drops(Drops { t_ns: 1, dropped_total: 2, ring_capacity: 16 }) };
        let json = serde_json::to_string(&DumpLine::new(&drops)).unwrap();
        assert_eq!(json, r#"{"seq":9,"kind":"drops","t_ns":1,"dropped_total":2,"ring_capacity":16}"#);
    }
}
