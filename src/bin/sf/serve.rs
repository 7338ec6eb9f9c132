//! How `sf exporter` gives its scrapes out: once on stdout, as node_exporter textfiles,
//! or over HTTP, one scrape a request.

use std::io::Write;
use std::net::TcpListener;
use std::path::Path;
use std::time::Duration;

use stagefrontier::core::log::safe_path;
use stagefrontier::report::discover::Dirs;
use stagefrontier::report::exporter::{Exporter, ExporterOptions};
use stagefrontier::report::hang::{HangOptions, DEFAULT_HANG};
use stagefrontier::report::Failure;

use crate::http::{Request, Response};
use crate::output::openmetrics::{render, Flavor};

/// Runs `sf exporter` until killed (or for one scrape with `--once`).
pub fn run(options: &ExporterOptions) -> Result<(), Failure> {
    let mut exporter = Exporter::default();
    let settings = DEFAULT_HANG;
    say_unreadable(&options.dirs);
    if options.once && options.textfile.is_none() {
        let text = render(&exporter.scrape(&options.dirs, &settings), Flavor::OpenMetrics);
        std::io::stdout().write_all(text.as_bytes())?;
        return Ok(());
    }
    if let Some(dir) = &options.textfile {
        // The collector's directory is node_exporter's to make (its owner and mode decide
        // who reads it): a missing one is named as missing, before any scrape.
        if std::fs::symlink_metadata(dir).is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound) {
            return Err(Failure::Message(format!(
                "{}: --textfile directory does not exist; create it, or pass node_exporter's \
                 --collector.textfile.directory",
                dir.display()
            )));
        }
        loop {
            let text = render(&exporter.scrape(&options.dirs, &settings), Flavor::Prometheus);
            write_textfile(dir, &text)
                .map_err(|e| Failure::Message(format!("{}: cannot write {TEXTFILE}: {e}", dir.display())))?;
            if options.once {
                return Ok(());
            }
            std::thread::sleep(Duration::from_secs(options.interval_s));
        }
    }
    let addr = options.listen.expect("the parser gives a listen address when there is no textfile");
    let listener = TcpListener::bind(addr)
        .map_err(|e| Failure::Message(format!("cannot listen on {addr}: {e}; pick another with --listen")))?;
    let bound = listener.local_addr().map_err(Failure::Output)?;
    let _ = writeln!(std::io::stderr(), "sf exporter: serving http://{bound}/metrics");
    crate::http::serve(listener, |request| answer(request, &mut exporter, &options.dirs, &settings))
        .map_err(|e| Failure::Message(format!("{bound}: cannot serve: {e}")))
}

/// A LOGDIR that is not a directory now: a log root appears with the first job on the
/// node, so the exporter goes on and reads it once it does, but a typo would otherwise
/// serve empty metrics without a word.
fn say_unreadable(dirs: &Dirs) {
    for dir in &dirs.0 {
        let why = match std::fs::metadata(dir) {
            Ok(m) if m.is_dir() => continue,
            Ok(_) => "not a directory".to_string(),
            Err(e) => e.to_string(),
        };
        let _ = writeln!(
            std::io::stderr(),
            "sf exporter: {}: {why}; no logs are read from it until it is a directory (a log root, \
             $SF_LOG_DIR or /dev/shm/stagefrontier-<uid>)",
            dir.display()
        );
    }
}

/// The textfile's name: node_exporter's textfile collector reads `*.prom`.
pub const TEXTFILE: &str = "stagefrontier.prom";

/// Written new under a temporary name (that the collector ignores) and renamed into
/// place, so node_exporter never reads half a scrape; the directory is walked again each
/// time, and neither it nor the file is ever reached through another user's link
/// (core::log::safe_path).
fn write_textfile(dir: &Path, text: &str) -> Result<(), String> {
    let dir = safe_path::output_dir(dir, false).map_err(|e| e.message().to_string())?;
    dir.write_new(TEXTFILE, 0o644, text.as_bytes()).map_err(|e| e.to_string())
}

/// `GET /metrics` scrapes, anything else is 404 or 405.
fn answer(request: &Request, exporter: &mut Exporter, dirs: &Dirs, settings: &HangOptions) -> Response {
    let text = |status, body: &str| Response { status, content_type: "text/plain", body: body.to_string() };
    match (request.method, request.path) {
        ("GET", "/metrics") => {
            let flavor = if request.accept.contains("application/openmetrics-text") {
                Flavor::OpenMetrics
            } else {
                Flavor::Prometheus
            };
            let body = render(&exporter.scrape(dirs, settings), flavor);
            Response { status: 200, content_type: flavor.content_type(), body }
        }
        ("GET", "/") => text(200, "sf exporter: metrics at /metrics\n"),
        ("GET", _) => text(404, "not found: metrics are at /metrics\n"),
        _ => text(405, "only GET\n"),
    }
}
