//! JSON for scripts: one object per report, on one line.

use std::io::{self, Write};

use serde::Serialize;

use super::Output;
use stagefrontier::report::frontier::FrontierReport;
use stagefrontier::report::hang::HangReport;
use stagefrontier::report::ls::LsReport;

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

impl<W: Write> Output for Json<W> {
    fn ls(&mut self, report: &LsReport) -> io::Result<()> {
        line(&mut self.out, report)?;
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
