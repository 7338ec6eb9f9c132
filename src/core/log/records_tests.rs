//! Every record kind through its codec and its JSON names.

use super::records::*;
use crate::core::log::format::PAYLOAD_CAPACITY;
use crate::core::log::nccl_op::NcclOp;

pub fn sample_call() -> NcclCall {
    NcclCall {
        op: NcclOp::AllReduce,
        t_enter_ns: 10,
        t_exit_ns: 20,
        comm_id: 0xfeed_beef_0000_0001,
        seq: 7,
        count: 1024,
        bytes: 4096,
        stream: 0x1234,
        tid: 99,
        peer: -1,
        dtype: 7,
        redop: 0,
        result: 0,
        group_depth: 1,
    }
}

#[test]
fn every_kind_round_trips() {
    let bodies = [
        RecordBody::NcclCall(sample_call()),
        RecordBody::CommCreated(CommCreated {
            t_ns: 5,
            comm_id: 1,
            parent_id: 2,
            rank: 3,
            nranks: 8,
            global_rank: 11,
            color: 1,
            key: -4,
            origin: CommOrigin::Split,
        }),
        RecordBody::Drops(Drops { t_ns: 9, dropped_total: 100, ring_capacity: 64, profiler_dropped: 7 }),
        RecordBody::Injection(Injection {
            t_ns: 4,
            action: InjectAction::Hang,
            rule: 2,
            op: Some(NcclOp::AllReduce),
            comm_id: 77,
            comm_seq: 40,
            step: Some(9),
            stage: None,
            delay_ns: 0,
            result: 0,
        }),
        RecordBody::StepVector(StepVector {
            step: 12,
            t_begin_ns: 1,
            wall_ns: 90,
            overlap_ns: 0,
            schema_hash: 0xabcdef,
            part: 1,
            stages_total: 8,
            nested_rejected: 1,
            count: 2,
            stage_ids: [4, 9, 0, 0, 0, 0],
            durations_ns: [30, 60, 0, 0, 0, 0],
        }),
        RecordBody::SideValue(SideValue { step: 3, name_id: 5, value: 0.25 }),
        RecordBody::HangEvidence(HangEvidence {
            t_ns: 100,
            since_ns: 50,
            comm_id: 77,
            comm_seq: 40,
            op: NcclOp::AllGather,
            threshold_ns: 30,
        }),
        RecordBody::ProfOp(ProfOp {
            t_start_ns: 1,
            t_stop_ns: 2,
            comm_hash: 0xabc,
            seq: 41,
            count: 1 << 20,
            rank: 3,
            peer: -1,
            func: 4,
            dtype: 7,
            algo: 1,
            proto: 2,
            n_channels: 8,
            n_warps: 16,
            abi: 5,
            p2p: false,
            api: true,
            ce: false,
        }),
        RecordBody::ProfProxy(ProfProxy {
            t_start_ns: 1,
            t_stop_ns: 9,
            comm_hash: 0xabc,
            seq: 41,
            trans_size: 65536,
            t_states_ns: [2, 3, 0],
            states: 1 << 8 | 1 << 20,
            transitions: 2,
            unit: ProfProxy::STEP,
            channel: 3,
            is_send: true,
            peer: 1,
            n_steps: 4,
            chunk_size: 1 << 17,
            step_no: 2,
        }),
        RecordBody::ProfNet(ProfNet {
            t_start_ns: 4,
            t_stop_ns: 5,
            comm_hash: 0xabc,
            seq: 41,
            plugin_id: 1 << 16 | 1,
            wr_id: 77,
            length: 4096,
            device: 0,
            qp_num: 0x1234,
            opcode: 1,
            updates: 0,
            qp: true,
        }),
    ];
    for body in bodies {
        let mut buf = [0u8; PAYLOAD_CAPACITY];
        let len = body.encode(&mut buf);
        assert!(len <= PAYLOAD_CAPACITY);
        assert_eq!(RecordBody::decode(body.kind(), &buf[..len]), Some(body));
        assert_eq!(RecordBody::decode(body.kind(), &buf[..len - 1]), None, "short payload");
        let json = serde_json::to_value(body).unwrap();
        assert_eq!(kind::code(json["kind"].as_str().unwrap()), Some(body.kind()), "{json}");
    }
}

#[test]
fn unknown_kinds_and_ops_do_not_decode() {
    let mut buf = [0u8; PAYLOAD_CAPACITY];
    let len = RecordBody::NcclCall(sample_call()).encode(&mut buf);
    assert_eq!(RecordBody::decode(77, &buf[..len]), None);
    buf[0] = 0xff;
    assert_eq!(RecordBody::decode(kind::NCCL_CALL, &buf[..len]), None);
}

#[test]
fn json_names_are_stable() {
    let json = serde_json::to_string(&RecordBody::NcclCall(sample_call())).unwrap();
    assert!(json.contains(r#""kind":"nccl_call""#), "{json}");
    assert!(json.contains(r#""op":"allreduce""#), "{json}");
    assert!(json.contains(r#""comm_id":"0xfeedbeef00000001""#), "{json}");
}
