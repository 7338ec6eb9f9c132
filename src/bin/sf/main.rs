//! `sf`: reads the rank logs libstagefrontier.so records. The binary only parses
//! arguments (`cli`), asks the library's `report` layer, prints the answer (`output`:
//! human, JSON, OpenMetrics, trace) and runs processes (`sf run`, serving the exporter).
//! Nothing here reads a log or judges one: that is `stagefrontier::report`.

// The argument structs' doc comments are `--help` text, where `<host>` and `<job id>` are
// placeholders, not HTML.
#![allow(rustdoc::invalid_html_tags)]

mod cli;
mod exit;
mod http;
mod job_control;
mod output;
mod progress;
mod run;
mod serve;

use std::io::{self, BufWriter, Write};
use std::process::ExitCode;

use cli::{Command, Format};
use output::terminal::{error_line, note_line};
use stagefrontier::report::ls::FileError;
use stagefrontier::report::{
    dump, frontier, hang, jobs, kernels, ls, net, path, roles, slow, snapshot, stacks_request, steps, wall, Failure,
};

fn main() -> ExitCode {
    // The report layer's progress and notes (missing ranks, hosts), on stderr.
    progress::show_on_terminal();
    let command = match cli::parse_from(std::env::args_os()) {
        Ok(command) => command,
        // Help, version and usage errors: clap prints them and picks the exit status (2).
        Err(e) => {
            if cli::is_usage_error(&e) && cli::asks_for_json(std::env::args_os()) {
                // A script reading `--json` gets a usage error as JSON where it reads the answer too.
                let mut stdout = io::stdout().lock();
                let _ = output::json_error(&mut stdout, &cli::usage_line(&e)).and_then(|_| stdout.flush());
            }
            e.exit()
        }
    };
    let format = command.format();
    match run(command) {
        Ok(code) => code,
        Err(Failure::Output(e)) if e.kind() == io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(Failure::Output(e)) => {
            error_line(&format!("cannot write the output: {e}"));
            ExitCode::from(exit::ERROR)
        }
        Err(Failure::Message(message)) => {
            // A script reading `--json` gets the error as JSON where it reads the answer.
            if format == Format::Json {
                let mut stdout = io::stdout().lock();
                let _ = output::json_error(&mut stdout, &message).and_then(|_| stdout.flush());
            }
            error_line(&message);
            ExitCode::from(exit::ERROR)
        }
    }
}

fn run(command: Command) -> Result<ExitCode, Failure> {
    let stdout = BufWriter::new(io::stdout().lock());
    match command {
        Command::Ls { path, format } => {
            // A log root holding several jobs: the jobs, for the operator to pick one.
            if let Some(report) = jobs::build(&path)? {
                output::jobs::write(format, stdout, &report)?;
                return Ok(status(None, &report.errors));
            }
            let report = ls::build(&path)?;
            output::new(format, stdout).ls(&report)?;
            Ok(status(report.mismatched().then_some(exit::MISMATCH), &report.errors))
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
        Command::Frontier { options, format } => {
            let report = frontier::build(&options)?;
            output::new(format, stdout).frontier(&report)?;
            Ok(status(report.found_culprit().then_some(exit::SLOW), &[]))
        }
        Command::Hang { dir, options, format, prometheus, stacks } => {
            let asked = if stacks {
                Some(stacks_request::ask(&dir, stacks_request::ANSWER_WAIT).map_err(Failure::Message)?)
            } else {
                None
            };
            let mut report = match prometheus {
                Some((url, job)) => hang::from_prometheus(&url, &job, &options)?,
                None => hang::build(&dir, &options)?,
            };
            report.stacks.stacks_asked = asked;
            output::new(format, stdout).hang(&report)?;
            let found = if report.mismatched() { Some(exit::MISMATCH) } else { report.hung.then_some(exit::HUNG) };
            Ok(status(found, &report.errors))
        }
        Command::Slow { dir, options, format } => {
            let report = slow::build(&dir, &options)?;
            output::slow::write(format, stdout, &report)?;
            Ok(status(report.found.then_some(exit::SLOW), &[]))
        }
        Command::Kernels { dir, options, format } => {
            let report = kernels::build(&dir, &options)?;
            output::kernels::write(format, stdout, &report)?;
            // No kernel records at all is nothing of that kind to judge: the report says so
            // in one line (which door to open), and that is no error.
            let found = (!report.anomalies.is_empty()).then_some(exit::SLOW);
            Ok(status(found, &report.errors))
        }
        Command::Net { dir, series, format } => {
            let report = net::build(&dir)?;
            output::net::write(format, stdout, &report, series)?;
            // Stuck evidence is a hang; degraded evidence alone, a slow link. No work request
            // and no port counter at all is nothing of that kind to judge: the report says so
            // and names the doors to open, and that is no error.
            let found = if report.stuck { Some(exit::HUNG) } else { report.degraded.then_some(exit::SLOW) };
            Ok(status(found, &report.errors))
        }
        Command::Roles { dir, format } => {
            let report = roles::build(&dir)?;
            output::roles::write(format, stdout, &report)?;
            Ok(status(None, &report.errors))
        }
        Command::Path { dir, format } => {
            let report = path::build(&dir)?;
            output::path::write(format, stdout, &report)?;
            Ok(status(report.found().then_some(exit::SLOW), &report.errors))
        }
        Command::Exporter { options } => {
            serve::run(&options)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Snapshot { dir, to, format } => {
            let report = snapshot::build(&dir, &to)?;
            output::snapshot::write(format, stdout, &report)?;
            Ok(status(None, &report.errors))
        }
        Command::Steps { dir, format } => {
            let report = steps::build(&dir)?;
            output::steps::write(format, stdout, &report)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Run { options } => {
            // The job writes to the same stdout: sf holds no lock on it while it runs.
            drop(stdout);
            run::run(&options)
        }
        Command::Trace { options, format } => {
            let written = output::trace::write_file(&options)?;
            match format {
                Format::Json => output::report(format, stdout, &written, |_, _| Ok(()))?,
                Format::Human => note_line(&output::trace::written_line(&written)),
            }
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
        None if errors.is_empty() => ExitCode::from(exit::NOTHING),
        None => ExitCode::from(exit::ERROR),
    }
}
