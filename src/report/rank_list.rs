//! Ranks named in text: runs such as `0-3, 7, 9-10`, cut after a bound so a big job's
//! list stays one readable line. Reports' messages and every human output share it.

/// How many runs (or entries) a list names before it says how many more there are.
pub const LIST_AT_MOST: usize = 16;

/// Sorted ranks as runs, `0-3, 7, 9-10`, at most `LIST_AT_MOST` runs.
pub fn ranges(ranks: &[i32]) -> String {
    runs(ranks, LIST_AT_MOST)
}

/// Sorted numbers (ranks, steps) as runs, `20-38, 41`, naming at most `at_most` runs and
/// counting the rest.
pub fn runs<T: Copy + Into<i128>>(sorted: &[T], at_most: usize) -> String {
    let mut runs: Vec<(i128, i128)> = Vec::new();
    for n in sorted.iter().map(|&n| n.into()) {
        match runs.last_mut() {
            Some((_, end)) if *end + 1 == n => *end = n,
            _ => runs.push((n, n)),
        }
    }
    let mut named: Vec<String> =
        runs.iter().take(at_most).map(|&(a, b)| if a == b { a.to_string() } else { format!("{a}-{b}") }).collect();
    if runs.len() > at_most {
        named.push(format!("and {} more", runs[at_most..].iter().map(|(a, b)| b - a + 1).sum::<i128>()));
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
