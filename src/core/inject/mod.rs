//! Scripted NCCL faults (`SF_INJECT`), for scoring analysis against ground truth. Off
//! unless set; then every rule that fires is written to the log as an `injection` record
//! before it acts. Imports only log and record; the live runtime holds the injector and
//! the comms tracer checks it. Never acts unless a rule matched.

pub mod rules;

use std::time::Duration;

use rules::{CommSelector, Rule};

use crate::core::log::nccl_op::NcclOp;
use crate::core::log::records::InjectAction;

/// The rules that concern this rank, with their position in `SF_INJECT`.
#[derive(Default)]
pub struct Injector {
    rules: Vec<(u16, Rule)>,
    rank: i32,
}

/// Where a rule is checked: in the NCCL door before a call enters NCCL (`op` set), or at
/// the end of a stage (`op` None).
pub struct Site<'a> {
    pub op: Option<NcclOp>,
    pub comm_id: u64,
    pub world_comm_id: u64,
    /// The sequence number the call gets if it enters.
    pub comm_seq: u64,
    /// The current logical step, when step markers are recorded.
    pub step: Option<u64>,
    /// The stage ending (at a stage end) or the stage the call is inside of.
    pub stage: Option<&'a [u8]>,
}

/// A rule that matched, with its concrete effect.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Firing {
    pub rule: u16,
    pub action: InjectAction,
    pub delay_ns: u64,
    pub result: i32,
}

impl Injector {
    /// Builds from `SF_INJECT`; returns the messages to print (one per problem).
    pub fn from_setting(text: Option<&str>, rank: i32) -> (Injector, Vec<String>) {
        let Some(text) = text.filter(|t| !t.trim().is_empty()) else {
            return (Injector::default(), Vec::new());
        };
        let parsed = match rules::parse(text) {
            Ok(parsed) => parsed,
            Err(error) => return (Injector::default(), vec![format!("SF_INJECT: {error}; no fault will be injected")]),
        };
        let mine = parsed
            .into_iter()
            .enumerate()
            .filter(|(_, r)| r.ranks.as_ref().is_none_or(|ranks| ranks.contains(&rank)))
            .map(|(i, r)| (i as u16, r))
            .collect();
        (Injector { rules: mine, rank }, Vec::new())
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// What to say at exit when this rank recorded no step or stage marker (`marked`
    /// false) and some of its rules name a stage or a step: those never fired, where a
    /// silent run would read as an injection that had no effect. One line, or `None`.
    pub fn unmarked_note(&self, marked: bool) -> Option<String> {
        let named: Vec<String> = self
            .rules
            .iter()
            .filter(|(_, rule)| rule.stage.is_some() || rule.step.is_some())
            .map(|(index, _)| (index + 1).to_string())
            .collect();
        if marked || named.is_empty() {
            return None;
        }
        let (rules, name, they) = if named.len() == 1 { ("rule", "names", "it") } else { ("rules", "name", "they") };
        Some(format!(
            "SF_INJECT: {rules} {} of rank {} {name} a stage or step, but this rank recorded no step or stage marker: \
             {they} never fired (stage and step rules need markers: the C API, NVTX ranges or the Python door)",
            named.join(","),
            self.rank
        ))
    }

    /// The first rule that matches this call, if any.
    pub fn check(&self, site: &Site) -> Option<Firing> {
        self.rules.iter().find(|(index, rule)| self.matches(*index, rule, site)).map(|(index, rule)| Firing {
            rule: *index,
            action: rule.action,
            delay_ns: self.delay_ns(*index, rule, site),
            result: if rule.action == InjectAction::Fail { rule.result } else { 0 },
        })
    }

    /// A rule naming a stage and no call (`op`, `comm`, `seq`) acts at the end of that
    /// stage; every other rule acts in the NCCL door.
    fn matches(&self, index: u16, rule: &Rule, site: &Site) -> bool {
        let stage_end_rule = rule.stage.is_some() && rule.op.is_none() && rule.comm.is_none() && rule.seq.is_none();
        if stage_end_rule != site.op.is_none() {
            return false;
        }
        let comm_ok = match rule.comm {
            None => true,
            Some(CommSelector::World) => site.comm_id != 0 && site.comm_id == site.world_comm_id,
            Some(CommSelector::Id(id)) => site.comm_id == id,
        };
        rule.op.is_none_or(|op| Some(op) == site.op)
            && comm_ok
            && rule.seq.is_none_or(|s| s.contains(site.comm_seq))
            && rule.step.is_none_or(|s| site.step.is_some_and(|step| s.contains(step)))
            && rule.stage.as_ref().is_none_or(|name| site.stage == Some(name.as_bytes()))
            && (rule.prob >= 1.0 || self.draw(index, rule, site, 0) < rule.prob)
    }

    fn delay_ns(&self, index: u16, rule: &Rule, site: &Site) -> u64 {
        let jitter = rule.jitter_ms * self.draw(index, rule, site, 1);
        ((rule.delay_ms + jitter) * 1e6) as u64
    }

    /// A deterministic uniform draw in [0, 1): the same rule, rank and call always decide
    /// the same way, so a fault matrix run can be repeated exactly.
    fn draw(&self, index: u16, rule: &Rule, site: &Site, purpose: u64) -> f64 {
        let x = crate::core::fnv::mix64(
            rule.seed
                ^ (self.rank as u32 as u64).rotate_left(32)
                ^ site.comm_seq.wrapping_mul(0x9E37_79B9_7F4A_7C15)
                ^ ((index as u64) << 48)
                ^ (purpose << 56),
        );
        (x >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Carries out a delay or a hang on the calling thread. Blocking here is the point: the
/// fault is the application thread not reaching NCCL.
pub fn act(firing: &Firing) {
    match firing.action {
        InjectAction::Delay => std::thread::sleep(Duration::from_nanos(firing.delay_ns)),
        InjectAction::Hang => loop {
            std::thread::sleep(Duration::from_secs(3600));
        },
        InjectAction::Fail => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn site(op: NcclOp, comm_seq: u64) -> Site<'static> {
        Site { op: Some(op), comm_id: 0xabc, world_comm_id: 0xabc, comm_seq, step: None, stage: None }
    }

    fn stage_end(stage: &'static str, step: u64) -> Site<'static> {
        Site { op: None, comm_id: 0, world_comm_id: 0, comm_seq: 0, step: Some(step), stage: Some(stage.as_bytes()) }
    }

    #[test]
    fn rules_for_other_ranks_are_dropped_at_start() {
        let (injector, notes) = Injector::from_setting(Some("hang:rank=5,op=allreduce,seq=40"), 4);
        assert!(injector.is_empty() && notes.is_empty());
        let (injector, _) = Injector::from_setting(Some("hang:rank=4|5,op=allreduce,seq=40"), 4);
        assert!(!injector.is_empty());
    }

    #[test]
    fn matching_by_op_seq_and_comm() {
        let (injector, _) = Injector::from_setting(Some("delay:op=allreduce,seq=3-4,comm=world,ms=2.5"), 0);
        assert_eq!(injector.check(&site(NcclOp::AllReduce, 2)), None);
        assert_eq!(injector.check(&site(NcclOp::AllGather, 3)), None);
        let firing = injector.check(&site(NcclOp::AllReduce, 4)).unwrap();
        assert_eq!((firing.rule, firing.action, firing.delay_ns), (0, InjectAction::Delay, 2_500_000));
        let other_comm = Site { comm_id: 0xdef, ..site(NcclOp::AllReduce, 4) };
        assert_eq!(injector.check(&other_comm), None);
    }

    #[test]
    fn probability_is_deterministic_and_roughly_right() {
        let (injector, _) = Injector::from_setting(Some("fail:prob=0.3,seed=11,result=ncclRemoteError"), 2);
        let fired: Vec<bool> = (1..=2000).map(|seq| injector.check(&site(NcclOp::Send, seq)).is_some()).collect();
        let again: Vec<bool> = (1..=2000).map(|seq| injector.check(&site(NcclOp::Send, seq)).is_some()).collect();
        assert_eq!(fired, again);
        let rate = fired.iter().filter(|f| **f).count() as f64 / 2000.0;
        assert!((0.25..0.35).contains(&rate), "{rate}");
        assert_eq!(injector.check(&site(NcclOp::Send, 1)).map_or(6, |f| f.result), 6);
    }

    #[test]
    fn a_malformed_setting_injects_nothing_and_says_why_once() {
        let (injector, notes) = Injector::from_setting(Some("hang:rank=1;delay:rank=1"), 1);
        assert!(injector.is_empty());
        assert_eq!(notes.len(), 1);
        assert!(notes[0].starts_with("SF_INJECT: rule 2"), "{}", notes[0]);
    }

    #[test]
    fn stage_rules_fire_at_the_end_of_their_stage_within_their_steps() {
        let (injector, _) = Injector::from_setting(Some("delay:rank=3,stage=data.next_wait,ms=120,step=10-50"), 3);
        assert_eq!(injector.check(&stage_end("data.next_wait", 9)), None);
        assert_eq!(injector.check(&stage_end("optim.step_cpu_wall", 10)), None);
        assert_eq!(injector.check(&stage_end("data.next_wait", 10)).map(|f| f.delay_ns), Some(120_000_000));
        let in_stage = Site { step: Some(10), stage: Some(b"data.next_wait".as_slice()), ..site(NcclOp::AllReduce, 1) };
        assert_eq!(injector.check(&in_stage), None, "a stage rule without a call does not act in the door");
    }

    #[test]
    fn stage_and_step_rules_on_an_unmarked_rank_are_named_once() {
        let setting = "delay:rank=1,op=allreduce,ms=5;delay:rank=1,stage=data.next_wait,ms=9;hang:op=allgather,step=4";
        let (injector, _) = Injector::from_setting(Some(setting), 1);
        let note = injector.unmarked_note(false).unwrap();
        assert!(note.starts_with("SF_INJECT: rules 2,3 of rank 1 name a stage or step"), "{note}");
        assert!(note.contains("they never fired"), "{note}");
        assert_eq!(injector.unmarked_note(true), None, "a marked rank says nothing");
        let (door_only, _) = Injector::from_setting(Some("delay:op=allreduce,ms=5"), 0);
        assert_eq!(door_only.unmarked_note(false), None, "door rules fire without markers");
        let (other_rank, _) = Injector::from_setting(Some("delay:rank=3,stage=data.next_wait,ms=9"), 0);
        assert_eq!(other_rank.unmarked_note(false), None, "a rule for another rank is not this rank's");
    }

    #[test]
    fn door_rules_can_be_scoped_to_steps_and_stages() {
        let (injector, _) = Injector::from_setting(Some("hang:op=allreduce,step=5,stage=model.backward_cpu_wall"), 0);
        let inside = |step, stage: &'static str| Site {
            step: Some(step),
            stage: Some(stage.as_bytes()),
            ..site(NcclOp::AllReduce, 1)
        };
        assert!(injector.check(&inside(5, "model.backward_cpu_wall")).is_some());
        assert!(injector.check(&inside(6, "model.backward_cpu_wall")).is_none());
        assert!(injector.check(&inside(5, "callbacks.cpu_wall")).is_none());
        assert!(injector.check(&site(NcclOp::AllReduce, 1)).is_none(), "no step known: no match");
    }
}
