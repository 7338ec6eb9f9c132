//! Ranks named in text: runs such as `0-3, 7, 9-10`, cut after a bound so a big job's
//! list stays one readable line. Reports' messages and every human output share it.

/// How many runs (or entries) a list names before it says how many more there are.
pub const LIST_AT_MOST: usize = 16;

/// Sorted ranks as runs, `0-3, 7, 9-10`, at most `LIST_AT_MOST` runs.
pub fn ranges(ranks: &[i32]) -> String {
    let mut runs: Vec<(i32, i32)> = Vec::new();
    for &r in ranks {
        match runs.last_mut() {
            Some((_, end)) if *end + 1 == r => *end = r,
            _ => runs.push((r, r)),
        }
    }
    let mut named: Vec<String> =
        runs.iter().take(LIST_AT_MOST).map(|&(a, b)| if a == b { a.to_string() } else { format!("{a}-{b}") }).collect();
    if runs.len() > LIST_AT_MOST {
        named.push(format!("and {} more", runs[LIST_AT_MOST..].iter().map(|(a, b)| b - a + 1).sum::<i32>()));
    }
    named.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rank_runs() {
        assert_eq!(ranges(&[3]), "3");
        assert_eq!(ranges(&[0, 1, 2, 3, 7, 9, 10]), "0-3, 7, 9-10");
        let scattered: Vec<i32> = (0..40).map(|r| r * 2).collect();
        assert!(ranges(&scattered).ends_with("30, and 24 more"), "{}", ranges(&scattered));
    }
}
