//! `NCCL_VERSION_CODE` as operators read it.

/// `major.minor.patch` of a version code, `None` while the code is unknown (0). nccl.h's
/// `NCCL_VERSION` macro encodes releases up to 2.8 as `major*1000 + minor*100 + patch` and
/// later ones as `major*10000 + minor*100 + patch`.
pub fn nccl_version_string(code: u64) -> Option<String> {
    let major_unit = match code {
        0 => return None,
        1..=9_999 => 1_000,
        _ => 10_000,
    };
    Some(format!("{}.{}.{}", code / major_unit, code % major_unit / 100, code % 100))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_encodings() {
        assert_eq!(nccl_version_string(22703).as_deref(), Some("2.27.3"));
        assert_eq!(nccl_version_string(21805).as_deref(), Some("2.18.5"));
        assert_eq!(nccl_version_string(2708).as_deref(), Some("2.7.8"));
        assert_eq!(nccl_version_string(0), None);
    }
}
