//! `sf dump`'s human lines: one aligned line per record, by kind.

use stagefrontier::core::log::nccl_op::{dtype_name, redop_name, result_name};
use stagefrontier::core::log::reader::Record;
use stagefrontier::core::log::records::{NcclCall, RecordBody};

use stagefrontier::core::net::profiler::{algo_name, func_name, proto_name};

use super::human::json_name;
use stagefrontier::report::dump::LogNames;

/// `names` resolves the stage and value ids of step vectors and side values.
pub(super) fn record_line(record: &Record, base_mono_ns: u64, names: &LogNames) -> String {
    let since_start = |t_ns: u64| format!("{:.6}", (t_ns as i128 - base_mono_ns as i128) as f64 / 1e9);
    let seq = record.seq;
    match &record.body {
        RecordBody::NcclCall(c) => format!("{seq:>8}  {:>12}  {:<12}  {}", since_start(c.t_enter_ns), "nccl_call", call_columns(c)),
        RecordBody::CommCreated(c) => format!(
            "{seq:>8}  {:>12}  {:<12}  {:<21}  {:#018x}  rank={}/{} global_rank={} color={} key={} parent={:#018x} origin={}",
            since_start(c.t_ns),
            "comm_created",
            "-",
            c.comm_id,
            c.rank,
            c.nranks,
            c.global_rank,
            c.color,
            c.key,
            c.parent_id,
            json_name(&c.origin)
        ),
        RecordBody::GroupDesc(g) => format!(
            "{seq:>8}  {:>12}  {:<12}  {:<21}  {:#018x}  size={} global_rank={} desc={:?}",
            since_start(g.t_ns),
            "group_desc",
            "-",
            g.members_id,
            g.size,
            g.global_rank,
            g.desc.to_string_lossy()
        ),
        RecordBody::Drops(d) => format!(
            "{seq:>8}  {:>12}  {:<12}  dropped_total={} ring_capacity={} profiler_dropped={}",
            since_start(d.t_ns),
            "drops",
            d.dropped_total,
            d.ring_capacity,
            d.profiler_dropped
        ),
        RecordBody::Injection(i) => format!(
            "{seq:>8}  {:>12}  {:<12}  {:<21}  {:#018x}  {:>8}  action={} rule={} delay_ms={:.3} result={}",
            since_start(i.t_ns),
            "injection",
            i.op.map_or("stage_end", |op| op.name()),
            i.comm_id,
            i.comm_seq,
            json_name(&i.action),
            i.rule,
            i.delay_ns as f64 / 1e6,
            result_name(i.result)
        ),
        RecordBody::HangEvidence(h) => format!(
            "{seq:>8}  {:>12}  {:<12}  {:<21}  {:#018x}  {:>8}  in flight {:.3} s (threshold {:.3} s)",
            since_start(h.t_ns),
            "hang_evidence",
            h.op.name(),
            h.comm_id,
            h.comm_seq,
            h.t_ns.saturating_sub(h.since_ns) as f64 / 1e9,
            h.threshold_ns as f64 / 1e9
        ),
        RecordBody::StepVector(v) => {
            let stages: Vec<String> =
                v.stages().map(|(id, ns)| format!("{}={:.3}ms", names.stage(id), ns as f64 / 1e6)).collect();
            format!(
                "{seq:>8}  {:>12}  {:<12}  step={} part={} wall={:.3}ms overlap={:.3}ms nested_rejected={}  {}",
                since_start(v.t_begin_ns),
                "step_vector",
                v.step,
                v.part,
                v.wall_ns as f64 / 1e6,
                v.overlap_ns as f64 / 1e6,
                v.nested_rejected,
                stages.join(" ")
            )
        }
        RecordBody::SideValue(v) => {
            format!("{seq:>8}  {:>12}  {:<12}  step={} {}={}", "-", "side_value", v.step, names.stage(v.name_id), v.value)
        }
        RecordBody::ProfOp(p) => format!(
            "{seq:>8}  {:>12}  {:<12}  {} nccl_comm={:#018x} nccl_seq={} count={} dtype={} peer={} algo={} proto={} nchannels={} abi=v{}",
            since_start(p.t_start_ns),
            match (p.api, p.ce, p.p2p) {
                (true, _, true) => "prof_p2p_api",
                (true, _, false) => "prof_coll_api",
                (_, true, _) => "prof_ce_coll",
                (_, _, true) => "prof_p2p",
                _ => "prof_coll",
            },
            func_name(p.func),
            p.comm_hash,
            p.seq,
            p.count,
            p.dtype,
            p.peer,
            algo_name(p.algo),
            proto_name(p.proto),
            p.n_channels,
            p.abi
        ),
        RecordBody::ProfProxy(p) => format!(
            "{seq:>8}  {:>12}  {:<12}  nccl_comm={:#018x} nccl_seq={} channel={} peer={} send={} step={} states={:#x} trans_size={}",
            since_start(p.t_start_ns),
            ["prof_proxy_op", "prof_step", "prof_kernel_ch"].get(p.unit as usize).unwrap_or(&"prof_proxy"),
            p.comm_hash,
            p.seq,
            p.channel,
            p.peer,
            p.is_send,
            p.step_no,
            p.states,
            p.trans_size
        ),
        RecordBody::ProfNet(n) => format!(
            "{seq:>8}  {:>12}  {:<12}  nccl_comm={:#018x} nccl_seq={} plugin={:#x} dev={} qp={} wr_id={} opcode={} length={}",
            since_start(n.t_start_ns),
            "prof_net",
            n.comm_hash,
            n.seq,
            n.plugin_id,
            n.device,
            n.qp_num,
            n.wr_id,
            n.opcode,
            n.length
        ),
        RecordBody::KernelName(_)
        | RecordBody::KernelCluster(_)
        | RecordBody::NcclKernels(_)
        | RecordBody::StreamBusy(_)
        | RecordBody::StageDevice(_) => super::human_kernels::kernel_record_line(seq, &record.body).unwrap_or_default(),
        RecordBody::QpWindow(_) | RecordBody::QpStuck(_) | RecordBody::QpDegraded(_) => {
            super::net::record_line(seq, &record.body, base_mono_ns).unwrap_or_default()
        }
        RecordBody::PortCounterName(_) | RecordBody::PortCounters(_) | RecordBody::VerbsDevice(_) => {
            super::human_ports::record_line(seq, &record.body, base_mono_ns).unwrap_or_default()
        }
        RecordBody::HostSync(_) | RecordBody::DeviceColl(_) | RecordBody::DeviceState(_) => {
            super::human_device::record_line(seq, &record.body, base_mono_ns).unwrap_or_default()
        }
        RecordBody::ProcessEnd(e) => format!(
            "{seq:>8}  {:>12}  {:<12}  {} at {}",
            since_start(e.t_ns),
            "process_end",
            e.cause(),
            stagefrontier::report::wall::rfc3339_ms(e.wall_ns)
        ),
        RecordBody::StackSample(s) => format!(
            "{seq:>8}  {:>12}  {:<12}  sample={} {} reason={} threads={} same_as={} dropped={} read={}us{}",
            since_start(s.t_ns),
            "stack_sample",
            s.sample,
            json_name(&s.status),
            json_name(&s.reason),
            s.threads,
            s.same_as,
            s.dropped,
            s.read_us,
            if s.note.as_bytes().is_empty() { String::new() } else { format!(" note={:?}", s.note.to_string_lossy()) }
        ),
        RecordBody::StackThread(t) => format!(
            "{seq:>8}  {:>12}  {:<12}  sample={} thread={} tid={} name={:?} frames={}/{}{}{}{}",
            "-",
            "stack_thread",
            t.sample,
            t.thread,
            t.os_tid,
            t.name.to_string_lossy(),
            t.frames,
            t.depth,
            if t.main { " main" } else { "" },
            if t.active { " active" } else { " idle" },
            if t.owns_gil { " gil" } else { "" }
        ),
        RecordBody::StackFrame(f) => format!(
            "{seq:>8}  {:>12}  {:<12}  sample={} thread={} #{} {} ({}:{})",
            "-",
            "stack_frame",
            f.sample,
            f.thread,
            f.depth,
            f.function(),
            f.file(),
            f.line
        ),
        RecordBody::CuptiStatus(s) => format!(
            "{seq:>8}  {:>12}  {:<12}  state={} cupti_version={} records={} buffers={} skipped={} dropped_by_cupti={} pool_refusals={} pool={}x{}B correlation={} cupti_result={}",
            since_start(s.t_ns),
            "cupti_status",
            json_name(&s.state),
            s.cupti_version,
            s.records,
            s.buffers,
            s.skipped,
            s.dropped_by_cupti,
            s.pool_refusals,
            s.pool_buffers,
            s.buffer_bytes,
            s.correlation as u8,
            s.cupti_result
        ),
    }
}

/// The columns after KIND for an NCCL call; `-` where the operation has no such field.
fn call_columns(c: &NcclCall) -> String {
    let moves_data = c.op.is_collective() || c.op.is_p2p();
    let data = |v: String| if moves_data { v } else { "-".to_string() };
    let (comm, comm_seq) = match c.comm_id {
        0 => ("-".to_string(), "-".to_string()),
        id => (format!("{id:#018x}"), c.seq.to_string()),
    };
    let mut line = format!(
        "{:<21}  {comm:<18}  {comm_seq:>8}  {:>12}  {:<10}  {:>14}  {:<6}  {:>12.3}  {}",
        c.op.name(),
        data(c.count.to_string()),
        data(dtype_name(c.dtype).to_string()),
        data(c.bytes.to_string()),
        if c.op.is_collective() { redop_name(c.redop) } else { "-" },
        c.t_exit_ns.saturating_sub(c.t_enter_ns) as f64 / 1e3,
        result_name(c.result)
    );
    if c.peer >= 0 {
        line += &format!("  peer={}", c.peer);
    }
    line += &format!("  group={} tid={} stream={:#x}", c.group_depth, c.tid, c.stream);
    line
}
