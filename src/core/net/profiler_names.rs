//! NCCL's names for the profiler door's codes (functions, datatypes, algorithms,
//! protocols): descriptors carry strings, records carry one byte each.

/// `ncclFunc_t` numbering for the classic functions (v1 passes the number; v2+ the name).
/// Codes from 8 are stagefrontier's own, for names newer NCCLs added.
pub(super) const FUNC_NAMES: [&str; 11] = [
    "Broadcast",
    "Reduce",
    "AllGather",
    "ReduceScatter",
    "AllReduce",
    "SendRecv",
    "Send",
    "Recv",
    "AlltoAll",
    "Gather",
    "Scatter",
];
/// `ncclDataType_t` numbering, names as `ncclDatatypeToString` gives them.
const DTYPE_NAMES: [&str; 12] = [
    "ncclInt8",
    "ncclUint8",
    "ncclInt32",
    "ncclUint32",
    "ncclInt64",
    "ncclUint64",
    "ncclFloat16",
    "ncclFloat32",
    "ncclFloat64",
    "ncclBfloat16",
    "ncclFloat8e4m3",
    "ncclFloat8e5m2",
];
/// NCCL_ALGO_* indices; `ncclAlgoToString` spells them upper case with underscores.
const ALGO_NAMES: [&str; 7] = ["TREE", "RING", "COLLNET_DIRECT", "COLLNET_CHAIN", "NVLS", "NVLS_TREE", "PAT"];
/// NCCL_PROTO_* indices.
const PROTO_NAMES: [&str; 3] = ["LL", "LL128", "SIMPLE"];

pub const UNKNOWN: u8 = 255;

fn code_of(names: &[&str], name: &[u8]) -> u8 {
    let squash = |c: u8| c.to_ascii_uppercase();
    names
        .iter()
        .position(|n| {
            let n = n.as_bytes();
            // Accept "Ring" for "RING" and "NVLSTree" for "NVLS_TREE".
            let a = n.iter().copied().filter(|&c| c != b'_').map(squash);
            let b = name.iter().copied().filter(|&c| c != b'_').map(squash);
            a.eq(b)
        })
        .map_or(UNKNOWN, |i| i as u8)
}

pub fn func_code(name: &[u8]) -> u8 {
    code_of(&FUNC_NAMES, name)
}
pub fn dtype_code(name: &[u8]) -> i8 {
    match code_of(&DTYPE_NAMES, name) {
        UNKNOWN => -1,
        c => c as i8,
    }
}
pub fn algo_code(name: &[u8]) -> u8 {
    code_of(&ALGO_NAMES, name)
}
pub fn proto_code(name: &[u8]) -> u8 {
    code_of(&PROTO_NAMES, name)
}
pub fn func_name(code: u8) -> &'static str {
    FUNC_NAMES.get(code as usize).copied().unwrap_or("?")
}
/// NCCL's name of an algorithm index (`ncclAlgoToString`); `?` when unknown.
pub fn algo_name(code: u8) -> &'static str {
    ALGO_NAMES.get(code as usize).copied().unwrap_or("?")
}
/// NCCL's name of a protocol index; `?` when unknown.
pub fn proto_name(code: u8) -> &'static str {
    PROTO_NAMES.get(code as usize).copied().unwrap_or("?")
}
