//! Whether a QP the library found slower than its own start is a degraded link. The
//! library compares each QP only with its own first windows, so a loaded host (a
//! descheduled proxy thread, another job's traffic) reads as a bad link. A link is
//! degraded only if the QP is also slower than its peers doing the same work (`Work`),
//! and for a sustained time: the episode is still open at a later sample, and the QP
//! stays below its peers by the library's threshold throughout.

/// One `qp_window` sample, as the judgement needs it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sample {
    pub t_ns: u64,
    pub window_bps: u64,
    /// A degraded episode was open when the sample was taken.
    pub degraded: bool,
}

/// One `qp_degraded` record: an episode opening.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Episode {
    pub t_ns: u64,
    pub window_bps: u64,
    pub threshold: f64,
}

/// The work a QP carries: its peers are the QPs carrying the same. Channels of one
/// communicator need not move data alike (NCCL's, and the fake's, rings give channels
/// different shares), and a receive completes when data arrives, a send when the network
/// is done with it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Work<'a> {
    /// A real QP, by the door that fed it: the records do not say which communicator or
    /// channel it serves; with every rank running the same collectives, the QPs of one
    /// door carry the same traffic.
    Door(&'a str),
    /// A link of proxy steps: one channel of one communicator, one direction.
    Link { comm_tag: u16, channel: u8, send: bool },
}

/// One QP of the job.
#[derive(Clone, Debug, PartialEq)]
pub struct Qp<'a> {
    /// Samples of QPs on the same host share a clock; others compare by their whole run.
    pub host: &'a str,
    pub work: Work<'a>,
    pub samples: &'a [Sample],
    pub episodes: &'a [Episode],
}

/// The answer for a QP with an episode.
#[derive(Clone, Debug, PartialEq)]
pub enum Judgement {
    /// Slower than its peers, for `sustained_ns` at least.
    Degraded { own_bps: u64, peers_bps: u64, peers: usize, sustained_ns: u64 },
    /// Slower than its own start only; `why` says what it lacks to be degraded.
    SlowerThanStart { own_bps: u64, peers_bps: Option<u64>, peers: usize, why: &'static str },
}

/// Shortest episode, from its record to the last sample still showing it open, that is
/// sustained: a descheduled moment is not a bad link.
pub const SUSTAINED_NS: u64 = 1_000_000_000;

/// The least a degraded link falls below its peers, whatever `SF_WR_DEGRADED` asks of
/// a QP's own start: at half its peers' rate or less (a link renegotiated to a lower
/// speed or width halves it; retransmissions cost more). A CPU-starved proxy thread on a
/// loaded 2-core host made QPs 26-30% slower than their peers for up to a second.
pub const MIN_SHORTFALL: f64 = 0.5;

fn median(mut v: Vec<u64>) -> Option<u64> {
    v.sort_unstable();
    (!v.is_empty()).then(|| v[v.len() / 2])
}

/// The judgement of `qps[i]`, `None` when it has no episode. Its first sustained episode
/// decides; a QP with several is degraded when any of them is.
pub fn judge(qps: &[Qp], i: usize) -> Option<Judgement> {
    let qp = &qps[i];
    let mut answer = None;
    for e in qp.episodes {
        let judged = judge_episode(qps, i, e);
        let degraded = matches!(judged, Judgement::Degraded { .. });
        if answer.is_none() || degraded {
            answer = Some(judged);
        }
        if degraded {
            break;
        }
    }
    answer
}

fn judge_episode(qps: &[Qp], i: usize, e: &Episode) -> Judgement {
    let qp = &qps[i];
    // The episode's span: from its record to the last later sample that shows it open,
    // before the QP recovered (the first later sample with the episode closed).
    let later: Vec<&Sample> = qp.samples.iter().filter(|s| s.t_ns > e.t_ns).take_while(|s| s.degraded).collect();
    let end_ns = later.last().map_or(e.t_ns, |s| s.t_ns);
    let own: Vec<u64> =
        std::iter::once(e.window_bps).chain(later.iter().map(|s| s.window_bps).filter(|&b| b > 0)).collect();
    let own_bps = median(own.clone()).unwrap_or(0);
    let peers: Vec<u64> = qps
        .iter()
        .enumerate()
        .filter(|(j, p)| *j != i && p.work == qp.work)
        .filter_map(|(_, p)| {
            let rates = |within: bool| {
                p.samples
                    .iter()
                    .filter(|s| s.window_bps > 0)
                    .filter(|s| !within || (s.t_ns + SUSTAINED_NS >= e.t_ns && s.t_ns <= end_ns + SUSTAINED_NS))
                    .map(|s| s.window_bps)
                    .collect::<Vec<u64>>()
            };
            // Same host, same clock: the peer over the episode's time; else its whole run.
            let during = if p.host == qp.host { rates(true) } else { Vec::new() };
            median(if during.is_empty() { rates(false) } else { during })
        })
        .collect();
    let n = peers.len();
    let Some(peers_bps) = median(peers) else {
        return Judgement::SlowerThanStart {
            own_bps,
            peers_bps: None,
            peers: 0,
            why: "no peer QP doing the same work to compare with",
        };
    };
    let limit = (1.0 - e.threshold) * peers_bps as f64;
    if !own.iter().all(|&b| (b as f64) < limit) {
        let why = "as fast as its peers: the host or the traffic slowed, not the link";
        return Judgement::SlowerThanStart { own_bps, peers_bps: Some(peers_bps), peers: n, why };
    }
    if own_bps as f64 > (1.0 - MIN_SHORTFALL.max(e.threshold)) * peers_bps as f64 {
        let why = "slower than its peers, but not by half: a loaded host does that, a degraded link does more";
        return Judgement::SlowerThanStart { own_bps, peers_bps: Some(peers_bps), peers: n, why };
    }
    let sustained_ns = end_ns - e.t_ns;
    if sustained_ns < SUSTAINED_NS {
        let why = "slower than its peers, but not for a sustained time (1 s or more)";
        return Judgement::SlowerThanStart { own_bps, peers_bps: Some(peers_bps), peers: n, why };
    }
    Judgement::Degraded { own_bps, peers_bps, peers: n, sustained_ns }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: u64 = 1_000_000_000;
    const PROFILER: Work = Work::Door("profiler");

    fn samples(bps: &[u64], degraded_from: usize) -> Vec<Sample> {
        bps.iter()
            .enumerate()
            .map(|(k, &b)| Sample { t_ns: (k as u64 + 1) * SEC, window_bps: b, degraded: k >= degraded_from })
            .collect()
    }

    fn episode(t_ns: u64, bps: u64) -> Vec<Episode> {
        vec![Episode { t_ns, window_bps: bps, threshold: 0.2 }]
    }

    #[test]
    fn slower_than_its_peers_for_seconds_is_degraded() {
        let peer = samples(&[100; 6], 99);
        let slow = samples(&[100, 100, 25, 25, 25, 25], 2);
        let e = episode(2 * SEC + 1, 25);
        let qps = [
            Qp { host: "a", work: PROFILER, samples: &peer, episodes: &[] },
            Qp { host: "a", work: PROFILER, samples: &slow, episodes: &e },
        ];
        assert_eq!(judge(&qps, 0), None);
        let Some(Judgement::Degraded { own_bps, peers_bps, peers, sustained_ns }) = judge(&qps, 1) else {
            panic!("{:?}", judge(&qps, 1))
        };
        assert_eq!((own_bps, peers_bps, peers), (25, 100, 1));
        assert_eq!(sustained_ns, 4 * SEC - 1);
    }

    #[test]
    fn a_host_slowing_every_qp_is_no_degraded_link() {
        // A CPU hog from the third second on: every QP slows alike.
        let all = samples(&[100, 100, 40, 40, 40, 40], 2);
        let e = episode(2 * SEC + 1, 40);
        let qps: Vec<Qp> = (0..4).map(|_| Qp { host: "a", work: PROFILER, samples: &all, episodes: &e }).collect();
        for i in 0..4 {
            assert!(
                matches!(judge(&qps, i), Some(Judgement::SlowerThanStart { peers: 3, .. })),
                "{:?}",
                judge(&qps, i)
            );
        }
    }

    #[test]
    fn a_dip_of_a_third_below_its_peers_is_host_noise_not_a_degraded_link() {
        // What a CPU hog did to one rank's proxy thread: 30% below the peers for seconds.
        let peer = samples(&[100; 6], 99);
        let dip = samples(&[100, 100, 70, 70, 70, 70], 2);
        let e = episode(2 * SEC + 1, 70);
        let qps = [
            Qp { host: "a", work: PROFILER, samples: &peer, episodes: &[] },
            Qp { host: "a", work: PROFILER, samples: &dip, episodes: &e },
        ];
        let Some(Judgement::SlowerThanStart { why, .. }) = judge(&qps, 1) else { panic!("{:?}", judge(&qps, 1)) };
        assert!(why.contains("not by half"), "{why}");
    }

    #[test]
    fn a_short_episode_or_no_peer_is_only_slower_than_its_start() {
        let peer = samples(&[100; 6], 99);
        // Recovered at the next sample: a descheduled moment.
        let blip = samples(&[100, 100, 25, 100, 100, 100], 2);
        let blip = [blip[..2].to_vec(), vec![Sample { degraded: false, ..blip[2] }], blip[3..].to_vec()].concat();
        let e = episode(2 * SEC + 1, 25);
        let qps = [
            Qp { host: "a", work: PROFILER, samples: &peer, episodes: &[] },
            Qp { host: "a", work: PROFILER, samples: &blip, episodes: &e },
        ];
        assert!(matches!(judge(&qps, 1), Some(Judgement::SlowerThanStart { .. })), "{:?}", judge(&qps, 1));
        // Alone in the job, or the only QP of its door: nothing to compare with.
        let slow = samples(&[100, 100, 25, 25, 25, 25], 2);
        let alone = [Qp { host: "a", work: PROFILER, samples: &slow, episodes: &e }];
        assert!(matches!(judge(&alone, 0), Some(Judgement::SlowerThanStart { peers: 0, .. })));
        let other_door = [
            Qp { host: "a", work: Work::Door("verbs"), samples: &peer, episodes: &[] },
            Qp { host: "a", work: PROFILER, samples: &slow, episodes: &e },
        ];
        assert!(matches!(judge(&other_door, 1), Some(Judgement::SlowerThanStart { peers: 0, .. })));
    }

    #[test]
    fn a_link_has_for_peers_only_the_links_of_its_communicator_channel_and_direction() {
        // Channel 0 carries less than half of channel 1's traffic on every rank.
        let ch0 = samples(&[40; 6], 99);
        let ch1 = samples(&[100; 6], 99);
        let slowed = samples(&[100, 100, 40, 40, 40, 40], 2);
        let e = episode(2 * SEC + 1, 40);
        let link = |channel, send| Work::Link { comm_tag: 7, channel, send };
        let qps = [
            Qp { host: "a", work: link(0, true), samples: &slowed, episodes: &e },
            Qp { host: "a", work: link(0, true), samples: &ch0, episodes: &[] },
            Qp { host: "a", work: link(1, true), samples: &ch1, episodes: &[] },
            Qp { host: "a", work: link(1, true), samples: &ch1, episodes: &[] },
            Qp { host: "a", work: link(0, false), samples: &ch1, episodes: &[] },
            Qp { host: "a", work: Work::Link { comm_tag: 8, channel: 0, send: true }, samples: &ch1, episodes: &[] },
        ];
        let Some(Judgement::SlowerThanStart { peers, peers_bps, why, .. }) = judge(&qps, 0) else {
            panic!("{:?}", judge(&qps, 0))
        };
        assert_eq!((peers, peers_bps), (1, Some(40)));
        assert!(why.contains("as fast as its peers"), "{why}");
    }
}
