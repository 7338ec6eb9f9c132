//! Seconds keyed by (rank, step, stage): the attribution's waits and caused waits. A
//! sorted vector rather than an ordered map: the tables are built once and then read
//! whole, in key order, several times (W_s, the blame tables, own time); a million
//! entries in a tree cost a third of `sf frontier --csv`'s time after the parse, in
//! building it and in walking its nodes.

use std::ops::Index;

/// (rank, step, stage): stages indexed in the job's (or the table's) stage list.
pub type StageKey = (u32, u64, usize);

/// Seconds per key, each key once, in key order (by rank, then step, then stage).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StageSeconds {
    entries: Vec<(StageKey, f64)>,
}

impl StageSeconds {
    /// The entries of `entries` in key order, a key given more than once holding the sum
    /// of its amounts added in the order given, from zero (as a map's `+=` would give it).
    /// Entries already in order, each key once, are taken as they are.
    pub fn summed(mut entries: Vec<(StageKey, f64)>) -> StageSeconds {
        if entries.windows(2).all(|p| p[0].0 < p[1].0) {
            for (_, seconds) in &mut entries {
                *seconds += 0.0;
            }
            return StageSeconds { entries };
        }
        // Stable: one key's amounts stay in the order given.
        entries.sort_by_key(|(key, _)| *key);
        let mut merged: Vec<(StageKey, f64)> = Vec::with_capacity(entries.len());
        for (key, seconds) in entries {
            match merged.last_mut() {
                Some((last, sum)) if *last == key => *sum += seconds,
                _ => merged.push((key, 0.0 + seconds)),
            }
        }
        StageSeconds { entries: merged }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn get(&self, key: &StageKey) -> Option<f64> {
        self.entries.binary_search_by_key(key, |(k, _)| *k).ok().map(|i| self.entries[i].1)
    }

    /// Sets `key`'s seconds, replacing any.
    pub fn insert(&mut self, key: StageKey, seconds: f64) {
        match self.entries.binary_search_by_key(&key, |(k, _)| *k) {
            Ok(i) => self.entries[i].1 = seconds,
            Err(i) => self.entries.insert(i, (key, seconds)),
        }
    }

    /// Adds `seconds` to `key`'s (zero when it has none).
    pub fn add(&mut self, key: StageKey, seconds: f64) {
        match self.entries.binary_search_by_key(&key, |(k, _)| *k) {
            Ok(i) => self.entries[i].1 += seconds,
            Err(i) => self.entries.insert(i, (key, 0.0 + seconds)),
        }
    }

    pub fn clear(&mut self) {
        self.entries.clear();
    }

    pub fn iter(&self) -> impl Iterator<Item = (&StageKey, &f64)> + Clone {
        self.entries.iter().map(|(key, seconds)| (key, seconds))
    }

    pub fn keys(&self) -> impl Iterator<Item = &StageKey> + Clone {
        self.entries.iter().map(|(key, _)| key)
    }

    /// The entries of `rank` in steps `first..=last`, in key order.
    pub fn of_rank(&self, rank: u32, first: u64, last: u64) -> &[(StageKey, f64)] {
        let from = self.entries.partition_point(|(k, _)| *k < (rank, first, 0));
        let to = self.entries.partition_point(|(k, _)| *k <= (rank, last, usize::MAX));
        &self.entries[from..to.max(from)]
    }

    /// Every entry, in key order.
    pub fn as_slice(&self) -> &[(StageKey, f64)] {
        &self.entries
    }
}

impl FromIterator<(StageKey, f64)> for StageSeconds {
    /// As [`StageSeconds::summed`].
    fn from_iter<I: IntoIterator<Item = (StageKey, f64)>>(entries: I) -> StageSeconds {
        StageSeconds::summed(entries.into_iter().collect())
    }
}

impl<'a> IntoIterator for &'a StageSeconds {
    type Item = (&'a StageKey, &'a f64);
    type IntoIter = std::iter::Map<std::slice::Iter<'a, (StageKey, f64)>, fn(&(StageKey, f64)) -> (&StageKey, &f64)>;

    fn into_iter(self) -> Self::IntoIter {
        self.entries.iter().map(|(key, seconds)| (key, seconds))
    }
}

impl IntoIterator for StageSeconds {
    type Item = (StageKey, f64);
    type IntoIter = std::vec::IntoIter<(StageKey, f64)>;

    fn into_iter(self) -> Self::IntoIter {
        self.entries.into_iter()
    }
}

impl Index<&StageKey> for StageSeconds {
    type Output = f64;

    /// Panics when `key` has no entry, as a map's index does (tests).
    fn index(&self, key: &StageKey) -> &f64 {
        let i = self.entries.binary_search_by_key(key, |(k, _)| *k).expect("a key with an entry");
        &self.entries[i].1
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn sums_repeated_keys_in_the_order_given_as_a_map_would() {
        // Amounts whose sum depends on the order they are added in.
        let given = [((1, 0, 0), 1e16), ((0, 2, 1), 0.5), ((1, 0, 0), 1.0), ((1, 0, 0), -1e16), ((0, 2, 0), -0.0)];
        let mut map: BTreeMap<StageKey, f64> = BTreeMap::new();
        for (key, seconds) in given {
            *map.entry(key).or_default() += seconds;
        }
        let table = StageSeconds::summed(given.to_vec());
        let bits = |pairs: Vec<(StageKey, f64)>| pairs.into_iter().map(|(k, s)| (k, s.to_bits())).collect::<Vec<_>>();
        assert_eq!(bits(table.clone().into_iter().collect()), bits(map.into_iter().collect()));
        assert_eq!(table.get(&(0, 2, 1)), Some(0.5));
        assert_eq!(table.get(&(0, 2, 2)), None);
    }

    #[test]
    fn a_rank_s_steps_are_one_run() {
        let table: StageSeconds =
            [((0, 5, 0), 1.0), ((1, 1, 3), 2.0), ((1, 2, 0), 3.0), ((1, 3, 1), 4.0), ((2, 2, 0), 5.0)]
                .into_iter()
                .collect();
        let seconds = |run: &[(StageKey, f64)]| run.iter().map(|(_, s)| *s).collect::<Vec<_>>();
        assert_eq!(seconds(table.of_rank(1, 2, 3)), [3.0, 4.0]);
        assert_eq!(seconds(table.of_rank(1, 0, u64::MAX)), [2.0, 3.0, 4.0]);
        assert!(table.of_rank(3, 0, u64::MAX).is_empty());
        assert!(table.of_rank(1, 4, 3).is_empty());
    }

    #[test]
    fn insert_replaces_and_add_sums() {
        let mut table = StageSeconds::default();
        table.insert((2, 0, 0), 1.0);
        table.insert((1, 0, 0), 1.0);
        table.insert((2, 0, 0), 3.0);
        table.add((1, 0, 0), 0.5);
        table.add((0, 9, 9), 0.25);
        assert_eq!(table.as_slice(), [((0, 9, 9), 0.25), ((1, 0, 0), 1.5), ((2, 0, 0), 3.0)]);
        assert_eq!(table[&(2, 0, 0)], 3.0);
    }
}
