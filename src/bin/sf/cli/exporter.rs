//! `sf exporter`'s arguments and help, apart from cli.rs so that file stays a table of commands.

use std::path::PathBuf;

use clap::Args;

use stagefrontier::report::discover::Dirs;

pub const LONG_ABOUT: &str = "\
Serve the rank logs of this node as Prometheus metrics, read afresh on every scrape: one
long-running process per node. Each scrape reads the logs' live headers and tables and
only the records committed since the previous scrape, so it costs milliseconds whatever
the logs' size. The metrics (sf_ prefix, units in the names) are labelled by job_id (not
job: Prometheus gives every target a job label of its own), rank, local_rank and host, and
by comm where they are per communicator; docs/many-nodes.md lists them.

The hang metrics (sf_hang_hung, sf_hang_state, sf_hang_missing_seconds) are sf hang's
analysis of this node's ranks. A rank on another node is seen by that node's exporter:
compare sf_nccl_coll_entered_seq across every node's series to find the rank that never
entered (deploy/prometheus/stagefrontier-rules.yml does), or ask for one report over
every node with `sf hang --prometheus URL --job ID`.

By default it serves http://127.0.0.1:9464/metrics (OpenMetrics to a Prometheus server
that asks for it, the Prometheus text format otherwise) and listens nowhere else; pass
--listen 0.0.0.0:9464 to be scraped from another machine. With --textfile DIR it listens
nowhere and writes DIR/stagefrontier.prom for node_exporter's textfile collector instead
(written to a temporary name and renamed: never read half-written), every --interval
seconds, or once with --once. --once alone prints one scrape on stdout.";

pub const EXAMPLES: &str = "\
Examples:
  sf exporter /dev/shm/stagefrontier-$(id -u)
  sf exporter --listen 0.0.0.0:9464 /dev/shm/stagefrontier-$(id -u)
  sf exporter --textfile /var/lib/node_exporter/textfile --once /dev/shm/stagefrontier-$(id -u)
  sf exporter --once /dev/shm/stagefrontier-$(id -u) | grep sf_hang";

#[derive(Args)]
pub struct ExporterArgs {
    /// Log roots or job directories of this node, searched for rank logs on every scrape
    #[arg(value_name = "LOGDIR", required = true)]
    dir: Vec<PathBuf>,
    /// Serve GET /metrics at this address [default: 127.0.0.1:9464, none with --textfile]
    #[arg(long, value_name = "ADDR")]
    listen: Option<std::net::SocketAddr>,
    /// Write DIR/stagefrontier.prom (node_exporter's textfile collector) instead of serving
    #[arg(long, value_name = "DIR")]
    textfile: Option<PathBuf>,
    /// One scrape, then exit: into the textfile, or on stdout without --textfile
    #[arg(long, conflicts_with = "listen")]
    once: bool,
    /// Seconds between textfile writes
    #[arg(long, value_name = "S", default_value = "15", requires = "textfile", value_parser = clap::value_parser!(u64).range(1..))]
    interval: u64,
}

impl ExporterArgs {
    pub fn options(self) -> stagefrontier::report::exporter::ExporterOptions {
        let default_listen = std::net::SocketAddr::from(([127, 0, 0, 1], 9464));
        stagefrontier::report::exporter::ExporterOptions {
            dirs: Dirs::new(self.dir),
            listen: self.listen.or((self.textfile.is_none() && !self.once).then_some(default_listen)),
            textfile: self.textfile,
            once: self.once,
            interval_s: self.interval,
        }
    }
}
