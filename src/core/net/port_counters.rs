//! The RDMA port-counter sampler: every SF_IB_SAMPLE_MS the collector thread reads the
//! counters the kernel exposes per InfiniBand/RoCE port,
//! `<SF_IB_SYSFS_ROOT>/<device>/ports/<port>/{counters,hw_counters}/<name>`, and writes the
//! ones that changed (`port_counters` records, names interned once in `port_counter_name`).
//!
//! Devices, ports and counter files are discovered at the first sample, within fixed caps
//! (files beyond them are counted in `over_cap`); each sample then opens and reads each
//! known path (three syscalls per counter), so a counter whose file disappears, turns
//! unreadable or comes back is noticed and written as a new state of its name.

use std::io::{self, Read};
use std::path::{Path, PathBuf};

use crate::core::log::records::{CounterState, CounterValue, PortCounterName, PortCounters, RecordBody, Text};
use crate::core::record::clock::monotonic_ns;

/// Devices, ports per device and counter files in all the sampler follows.
pub const MAX_DEVICES: usize = 16;
pub const MAX_PORTS: usize = 8;
pub const MAX_COUNTERS: usize = 1024;

struct Counter {
    path: PathBuf,
    name: PortCounterName,
    last: Option<u64>,
}

/// The sampler's state, kept by the collector. Inert until the first round reads the
/// config; off for good when SF_IB_SAMPLE_MS is 0.
#[derive(Default)]
pub struct PortSampler {
    counters: Vec<Counter>,
    over_cap: u16,
    discovered: bool,
    next_ns: u64,
    last_sample_ns: u64,
}

impl PortSampler {
    /// One collector round: samples every `sample_ms` (never when 0) the counters found
    /// under `sysfs_root`.
    pub fn round(&mut self, sample_ms: u64, sysfs_root: &Path, emit: &mut dyn FnMut(&RecordBody)) {
        let period_ns = sample_ms.saturating_mul(1_000_000);
        let now = monotonic_ns();
        if period_ns == 0 || now < self.next_ns {
            return;
        }
        self.next_ns = now + period_ns;
        if !self.discovered {
            self.discover(sysfs_root);
        }
        self.sample(now, emit);
    }

    /// Finds every counter file under `root`, in name order, within the caps.
    fn discover(&mut self, root: &Path) {
        self.discovered = true;
        let mut over = 0usize;
        for (d, device) in sorted_entries(root).into_iter().enumerate() {
            if d >= MAX_DEVICES {
                over += 1;
                continue;
            }
            let ports_dir = root.join(&device).join("ports");
            let mut ports: Vec<(u16, String)> =
                sorted_entries(&ports_dir).into_iter().filter_map(|p| Some((p.parse().ok()?, p))).collect();
            ports.sort();
            for (p, (port, port_name)) in ports.into_iter().enumerate() {
                if p >= MAX_PORTS {
                    over += 1;
                    continue;
                }
                for (dir, hw) in [("counters", false), ("hw_counters", true)] {
                    let counter_dir = ports_dir.join(&port_name).join(dir);
                    for file in sorted_entries(&counter_dir) {
                        if self.counters.len() >= MAX_COUNTERS {
                            over += 1;
                            continue;
                        }
                        let name = PortCounterName {
                            t_ns: 0,
                            name_id: self.counters.len() as u16,
                            port,
                            hw,
                            state: CounterState::Present,
                            device: Text::new(device.as_bytes()),
                            counter: Text::new(file.as_bytes()),
                        };
                        self.counters.push(Counter { path: counter_dir.join(&file), name, last: None });
                    }
                }
            }
        }
        self.over_cap = over.min(u16::MAX as usize) as u16;
    }

    /// Reads every counter; writes the names whose state is new and the values that changed.
    fn sample(&mut self, now: u64, emit: &mut dyn FnMut(&RecordBody)) {
        let interval_ns = if self.last_sample_ns == 0 { 0 } else { now - self.last_sample_ns };
        self.last_sample_ns = now;
        let mut batch = PortCounters {
            t_ns: now,
            interval_ns,
            over_cap: self.over_cap,
            count: 0,
            values: [CounterValue::default(); PortCounters::CAPACITY],
        };
        let mut buf = [0u8; 64];
        for counter in &mut self.counters {
            let (state, value) = match read_counter(&counter.path, &mut buf) {
                Ok(value) => (CounterState::Present, Some(value)),
                Err(e) if e.kind() == io::ErrorKind::NotFound => (CounterState::Gone, None),
                Err(_) => (CounterState::Unreadable, None),
            };
            // A name is written before its first value, and again on every change of state.
            if state != counter.name.state || counter.name.t_ns == 0 {
                counter.name.state = state;
                counter.name.t_ns = now;
                emit(&RecordBody::PortCounterName(counter.name));
            }
            let Some(value) = value else { continue };
            let delta = match counter.last {
                None => 0,
                Some(last) if value == last => continue,
                Some(last) if value > last => value - last,
                // The counter went down: reset (or wrapped); it counts from 0 again.
                Some(_) => value,
            };
            counter.last = Some(value);
            batch.values[batch.count as usize] = CounterValue { name_id: counter.name.name_id, value, delta };
            batch.count += 1;
            if batch.count as usize == PortCounters::CAPACITY {
                emit(&RecordBody::PortCounters(batch));
                batch.count = 0;
            }
        }
        if batch.count > 0 {
            emit(&RecordBody::PortCounters(batch));
        }
    }
}

/// Names of the entries of `dir`, sorted; none when it cannot be read.
fn sorted_entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|entries| entries.filter_map(|e| e.ok()?.file_name().into_string().ok()).collect())
        .unwrap_or_default();
    names.sort();
    names
}

/// One counter file's value: a decimal number, as the kernel prints it. Opened without
/// blocking and read only if it is a regular file: a FIFO planted in the tree (or any
/// file that blocks) must not stall the collector, and with it the process's exit.
fn read_counter(path: &Path, buf: &mut [u8; 64]) -> io::Result<u64> {
    let mut file = crate::core::regular_file::open_regular(path)?;
    let mut len = 0;
    while len < buf.len() {
        match file.read(&mut buf[len..])? {
            0 => break,
            n => len += n,
        }
    }
    std::str::from_utf8(&buf[..len])
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "not a number"))
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Tree(PathBuf);

    impl Tree {
        fn new(name: &str) -> Tree {
            let root = std::env::temp_dir().join(format!("sf-ports-{}-{name}", std::process::id()));
            let _ = std::fs::remove_dir_all(&root);
            Tree(root)
        }
        fn set(&self, rel: &str, value: &str) {
            let path = self.0.join(rel);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, value).unwrap();
        }
    }

    impl Drop for Tree {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn sample(sampler: &mut PortSampler, now: u64) -> Vec<RecordBody> {
        let mut out = Vec::new();
        sampler.sample(now, &mut |r| out.push(*r));
        out
    }

    fn values(records: &[RecordBody]) -> Vec<(u16, u64, u64)> {
        let mut v = Vec::new();
        for r in records {
            if let RecordBody::PortCounters(p) = r {
                v.extend(p.values().iter().map(|c| (c.name_id, c.value, c.delta)));
            }
        }
        v
    }

    fn names(records: &[RecordBody]) -> Vec<(String, CounterState)> {
        records
            .iter()
            .filter_map(|r| match r {
                RecordBody::PortCounterName(n) => Some((n.counter.to_string_lossy(), n.state)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn writes_changes_only_and_follows_files_that_go_away() {
        let tree = Tree::new("changes");
        tree.set("mlx5_0/ports/1/counters/port_xmit_data", "100\n");
        tree.set("mlx5_0/ports/1/counters/port_rcv_data", "7\n");
        tree.set("mlx5_0/ports/1/hw_counters/out_of_buffer", "0\n");
        tree.set("mlx5_0/ports/1/counters/symbol_error", "x\n");
        let mut sampler = PortSampler::default();
        sampler.discover(&tree.0);
        assert_eq!(sampler.counters.len(), 4);

        let first = sample(&mut sampler, 1_000);
        assert_eq!(names(&first).len(), 4, "every name once");
        assert!(names(&first).contains(&("symbol_error".into(), CounterState::Unreadable)));
        // Sorted: counters/port_rcv_data (0), port_xmit_data (1), symbol_error (2), hw out_of_buffer (3).
        assert_eq!(values(&first), [(0, 7, 0), (1, 100, 0), (3, 0, 0)]);

        assert!(sample(&mut sampler, 2_000).is_empty(), "a quiet fabric writes nothing");

        tree.set("mlx5_0/ports/1/counters/port_xmit_data", "350\n");
        std::fs::remove_file(tree.0.join("mlx5_0/ports/1/counters/port_rcv_data")).unwrap();
        tree.set("mlx5_0/ports/1/counters/symbol_error", "3\n");
        let third = sample(&mut sampler, 3_000);
        assert_eq!(
            names(&third),
            [("port_rcv_data".into(), CounterState::Gone), ("symbol_error".into(), CounterState::Present)]
        );
        assert_eq!(values(&third), [(1, 350, 250), (2, 3, 0)]);
        let interval = third.iter().find_map(|r| match r {
            RecordBody::PortCounters(p) => Some(p.interval_ns),
            _ => None,
        });
        assert_eq!(interval, Some(1_000));

        tree.set("mlx5_0/ports/1/counters/port_xmit_data", "20\n");
        assert_eq!(values(&sample(&mut sampler, 4_000)), [(1, 20, 20)], "a reset counts from zero");
    }

    #[test]
    fn a_counter_that_cannot_be_read_is_unreadable() {
        let tree = Tree::new("unreadable");
        tree.set("d/ports/1/counters/c/inside", "5\n"); // `c` is a directory: read fails, even as root
        tree.set("d/ports/1/counters/e", "");
        let fifo =
            std::ffi::CString::new(tree.0.join("d/ports/1/counters/f").into_os_string().into_encoded_bytes()).unwrap();
        // SAFETY: mkfifo with a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        let mut sampler = PortSampler::default();
        sampler.discover(&tree.0);
        let got = names(&sample(&mut sampler, 1));
        let unreadable = |n: &str| (n.to_string(), CounterState::Unreadable);
        assert_eq!(got, [unreadable("c"), unreadable("e"), unreadable("f")], "a FIFO is never waited on");
    }

    #[test]
    fn discovery_is_bounded_and_counts_what_it_leaves_out() {
        let tree = Tree::new("caps");
        for d in 0..MAX_DEVICES + 2 {
            tree.set(&format!("dev{d:02}/ports/1/counters/c"), "1");
        }
        for p in 1..=MAX_PORTS + 1 {
            tree.set(&format!("dev00/ports/{p}/counters/c"), "1");
        }
        let mut sampler = PortSampler::default();
        sampler.discover(&tree.0);
        assert_eq!(sampler.counters.len(), MAX_DEVICES - 1 + MAX_PORTS);
        assert_eq!(sampler.over_cap, 2 + 1);
        assert!(sampler.counters.iter().all(|c| c.name.port >= 1));
    }

    #[test]
    fn missing_root_is_quiet() {
        let mut sampler = PortSampler::default();
        sampler.discover(Path::new("/nonexistent/sf-ib"));
        assert!(sample(&mut sampler, 1).is_empty());
    }
}
