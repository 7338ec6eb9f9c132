//! Putting ranks of different hosts on one timeline. A rank's times are its host's
//! `CLOCK_MONOTONIC`, which means nothing on another host; its log header pairs a
//! monotonic and a realtime reading taken together at the library's start, and every
//! heartbeat pairs them again. Through the first pair a rank's times become wall-clock
//! times, which compare across hosts as well as the hosts' clocks agree (NTP, PTP).
//!
//! How well that holds is shown, not assumed: per host, how far its ranks' calibrations
//! disagree with each other (the same clocks read at different moments), and how far the
//! wall clock moved against the monotonic one since the start (an NTP step or slew, read
//! from the newest heartbeat). The sum bounds how wrong a rank's wall-clock mapping is on
//! its own host; what the hosts' clocks disagree by, no log can tell.

use serde::Serialize;

/// One rank's clock readings, from its log header.
#[derive(Clone, Debug)]
pub struct RankClock {
    pub host: String,
    pub base_mono_ns: u64,
    pub base_wall_ns: u64,
    /// The newest heartbeat's pair (0 when it never beat).
    pub heartbeat_mono_ns: u64,
    pub heartbeat_wall_ns: u64,
}

impl RankClock {
    /// `mono_ns` of this rank as wall-clock ns since the epoch (as i128: no overflow).
    pub fn to_wall(&self, mono_ns: u64) -> i128 {
        self.base_wall_ns as i128 + (mono_ns as i128 - self.base_mono_ns as i128)
    }

    /// Wall minus monotonic at the start.
    fn offset(&self) -> i128 {
        self.base_wall_ns as i128 - self.base_mono_ns as i128
    }

    /// How far the wall clock moved against the monotonic one since the start.
    fn drift(&self) -> Option<i128> {
        (self.heartbeat_mono_ns != 0 && self.heartbeat_wall_ns != 0)
            .then(|| (self.heartbeat_wall_ns as i128 - self.heartbeat_mono_ns as i128) - self.offset())
    }
}

/// One host's clocks as its ranks' logs show them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct HostClock {
    pub host: String,
    pub ranks: usize,
    /// The widest disagreement between two of its ranks' start calibrations, in ns.
    pub calibration_spread_ns: u64,
    /// The largest step or slew of its wall clock since a rank started, in ns.
    pub wall_drift_ns: u64,
    /// Their sum: how wrong a time of this host may be on the common (wall-clock)
    /// timeline, apart from what the hosts' clocks disagree by.
    pub uncertainty_ns: u64,
}

/// The hosts of `ranks`, sorted by name. Calibrations without a wall-clock reading are
/// left out (no mapping to check).
pub fn host_clocks(ranks: &[RankClock]) -> Vec<HostClock> {
    let mut hosts: Vec<HostClock> = Vec::new();
    let mut names: Vec<&str> = ranks.iter().map(|r| r.host.as_str()).collect();
    names.sort_unstable();
    names.dedup();
    for name in names {
        let of_host: Vec<&RankClock> = ranks.iter().filter(|r| r.host == name && r.base_wall_ns != 0).collect();
        let offsets: Vec<i128> = of_host.iter().map(|r| r.offset()).collect();
        let spread = match (offsets.iter().min(), offsets.iter().max()) {
            (Some(lo), Some(hi)) => clamp(hi - lo),
            _ => 0,
        };
        let drift = of_host.iter().filter_map(|r| r.drift()).map(|d| clamp(d.abs())).max().unwrap_or(0);
        hosts.push(HostClock {
            host: name.to_string(),
            ranks: of_host.len(),
            calibration_spread_ns: spread,
            wall_drift_ns: drift,
            uncertainty_ns: spread.saturating_add(drift),
        });
    }
    hosts
}

fn clamp(v: i128) -> u64 {
    v.clamp(0, u64::MAX as i128) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rank(host: &str, base_mono: u64, base_wall: u64, hb_mono: u64, hb_wall: u64) -> RankClock {
        RankClock {
            host: host.into(),
            base_mono_ns: base_mono,
            base_wall_ns: base_wall,
            heartbeat_mono_ns: hb_mono,
            heartbeat_wall_ns: hb_wall,
        }
    }

    #[test]
    fn spread_and_drift_per_host() {
        let ranks = [
            rank("a", 100, 1_000_100, 200, 1_000_200),
            // The same host's clocks read 30 ns apart, and its wall clock stepped 500 ns.
            rank("a", 150, 1_000_180, 300, 1_000_830),
            rank("b", 7, 2_000_000, 0, 0),
        ];
        let hosts = host_clocks(&ranks);
        assert_eq!(hosts.len(), 2);
        assert_eq!(
            hosts[0],
            HostClock {
                host: "a".into(),
                ranks: 2,
                calibration_spread_ns: 30,
                wall_drift_ns: 500,
                uncertainty_ns: 530
            }
        );
        assert_eq!((hosts[1].ranks, hosts[1].uncertainty_ns), (1, 0));
        assert_eq!(ranks[2].to_wall(10), 2_000_003);
    }
}
