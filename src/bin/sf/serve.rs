//! How `sf exporter` gives its scrapes out: once on stdout, as node_exporter textfiles,
//! or over HTTP, one scrape a request.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::time::Duration;

use stagefrontier::core::log::safe_path;
use stagefrontier::report::discover::Dirs;
use stagefrontier::report::exporter::{Exporter, ExporterOptions};
use stagefrontier::report::hang::{HangOptions, DEFAULT_HANG};
use stagefrontier::report::Failure;

use crate::output::openmetrics::{render, Flavor};

/// How long a scrape's client may take to send its request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// The largest request head read.
const REQUEST_MAX_BYTES: usize = 16 << 10;

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
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        // One scrape at a time: a scrape is milliseconds, and Prometheus waits its turn.
        let _ = serve(stream, &mut exporter, &options.dirs, &settings);
    }
    Ok(())
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
    let new = dir.create_new(TEXTFILE, 0o644).map_err(|e| e.to_string())?;
    new.file().write_all(text.as_bytes()).map_err(|e| e.to_string())?;
    new.commit().map_err(|e| e.to_string())
}

/// Answers one HTTP/1.x request: `GET /metrics` scrapes, anything else is 404 or 405.
fn serve(mut stream: TcpStream, exporter: &mut Exporter, dirs: &Dirs, settings: &HangOptions) -> std::io::Result<()> {
    stream.set_read_timeout(Some(REQUEST_TIMEOUT))?;
    stream.set_write_timeout(Some(REQUEST_TIMEOUT))?;
    let mut head = Vec::new();
    let mut buf = [0u8; 2048];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < REQUEST_MAX_BYTES {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&head);
    let mut lines = text.lines();
    let request: Vec<&str> = lines.next().unwrap_or_default().split_whitespace().collect();
    let accept = lines
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("accept"))
        .map_or(String::new(), |(_, v)| v.to_string());
    let (status, content_type, body) = match request.as_slice() {
        ["GET", path, ..] if path.split('?').next() == Some("/metrics") => {
            let flavor =
                if accept.contains("application/openmetrics-text") { Flavor::OpenMetrics } else { Flavor::Prometheus };
            (200, flavor.content_type(), render(&exporter.scrape(dirs, settings), flavor))
        }
        ["GET", "/", ..] => (200, "text/plain", "sf exporter: metrics at /metrics\n".to_string()),
        ["GET", ..] => (404, "text/plain", "not found: metrics are at /metrics\n".to_string()),
        _ => (405, "text/plain", "only GET\n".to_string()),
    };
    let reason = match status {
        200 => "OK",
        404 => "Not Found",
        _ => "Method Not Allowed",
    };
    write!(
        stream,
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    stream.flush()
}
