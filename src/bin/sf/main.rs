//! `sf`: reads the rank logs libstagefrontier.so records.

mod cli;
mod commands;
mod discover;
mod output;
mod progress;
mod wall;

use std::io::{self, BufWriter, Write};
use std::process::ExitCode;

use cli::Command;
use commands::ls::FileError;
use commands::{dump, frontier, hang, kernels, ls, net, slow, steps, Failure};

fn main() -> ExitCode {
    let command = match cli::parse_from(std::env::args_os()) {
        Ok(command) => command,
        // Help, version and usage errors: clap prints them and picks the exit status.
        Err(e) => e.exit(),
    };
    match run(command) {
        Ok(code) => code,
        Err(Failure::Output(e)) if e.kind() == io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(Failure::Output(e)) => {
            error_line(&format!("cannot write the output: {e}"));
            ExitCode::FAILURE
        }
        Err(Failure::Message(message)) => {
            error_line(&message);
            ExitCode::FAILURE
        }
    }
}

fn run(command: Command) -> Result<ExitCode, Failure> {
    let stdout = BufWriter::new(io::stdout().lock());
    match command {
        Command::Ls { path, format } => {
            let report = ls::build(&path)?;
            output::new(format, stdout).ls(&report)?;
            Ok(status(None, &report.errors))
        }
        Command::Dump { file, options, format } => {
            let log = dump::open(&file)?;
            if options.header {
                output::dump::header(format, stdout, &dump::header(&file, &log))?;
                return Ok(ExitCode::SUCCESS);
            }
            let names = dump::LogNames::of(&log);
            let clock = wall::WallClock::of(&log.header);
            let mut writer = output::dump::RecordWriter::new(format, stdout, &names, clock, log.header.base_mono_ns)?;
            let stats = dump::stream(&log, &options, |record| writer.record(record))?;
            writer.finish()?;
            note_line(&output::scan_summary(&file.display().to_string(), &stats));
            Ok(ExitCode::SUCCESS)
        }
        Command::Frontier { options, format } => match frontier::build(&options) {
            Ok(report) => {
                output::new(format, stdout).frontier(&report)?;
                Ok(ExitCode::SUCCESS)
            }
            // A bad CSV is bad input, like a usage error: exit 2.
            Err(Failure::Message(message)) => {
                error_line(&message);
                Ok(ExitCode::from(2))
            }
            Err(failure) => Err(failure),
        },
        Command::Hang { dir, options, format } => {
            let report = hang::build(&dir, &options)?;
            output::new(format, stdout).hang(&report)?;
            Ok(status(report.hung.then_some(EXIT_HUNG), &report.errors))
        }
        Command::Slow { dir, options, format } => {
            let report = slow::build(&dir, &options)?;
            output::slow::write(format, stdout, &report)?;
            Ok(if report.found { ExitCode::from(EXIT_SLOW) } else { ExitCode::SUCCESS })
        }
        Command::Kernels { dir, options, format } => {
            let report = kernels::build(&dir, &options)?;
            output::kernels::write(format, stdout, &report)?;
            Ok(status((!report.anomalies.is_empty()).then_some(EXIT_SLOW), &report.errors))
        }
        Command::Net { dir, series, format } => {
            let report = net::build(&dir)?;
            output::net::write(format, stdout, &report, series)?;
            // Stuck evidence is a hang; degraded evidence alone, a slow link.
            let found = if report.stuck { Some(EXIT_HUNG) } else { report.degraded.then_some(EXIT_SLOW) };
            Ok(status(found, &report.errors))
        }
        Command::Steps { dir, format } => {
            let report = steps::build(&dir)?;
            output::steps::write(format, stdout, &report)?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Prints the logs that could not be read, after the report where a long one does not
/// scroll them away, and picks the status: `found`'s code when the command found what it
/// looks for (that is the answer even when some log could not be read), else 1 when a log
/// could not be read, else 0.
fn status(found: Option<u8>, errors: &[FileError]) -> ExitCode {
    for error in errors {
        error_line(&error.error);
    }
    match found {
        Some(code) => ExitCode::from(code),
        None if errors.is_empty() => ExitCode::SUCCESS,
        None => ExitCode::FAILURE,
    }
}

/// `sf slow`'s status when it finds a slow rank, a jitter spike or a regression.
const EXIT_SLOW: u8 = 4;

/// `sf hang`'s status for a diagnosed hang, apart from 1 for errors so scripts can tell.
const EXIT_HUNG: u8 = 3;

fn error_line(message: &str) {
    note_line(&format!("sf: {message}"));
}

/// `eprintln!` would panic if stderr were closed; a lost diagnostic is not worth one.
fn note_line(line: &str) {
    let _ = writeln!(io::stderr(), "{line}");
}
