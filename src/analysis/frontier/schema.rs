//! The ordered stage list a step's durations follow (Appendix A's ordered-stage contract).

use std::fmt;

/// Ordered, non-empty, duplicate-free stage names. Two steps belong in one window only if
/// their schemas are equal: prefixes over different boundary lists do not compare.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Schema {
    stages: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SchemaError {
    Empty,
    Duplicate(String),
    BlankName,
}

impl fmt::Display for SchemaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SchemaError::Empty => write!(f, "the stage list is empty"),
            SchemaError::Duplicate(name) => write!(f, "stage {name} is listed twice"),
            SchemaError::BlankName => write!(f, "a stage name is blank"),
        }
    }
}

impl std::error::Error for SchemaError {}

/// Separates a stage's base name from its gradient-accumulation microstep index:
/// `backward@2` is microstep 2 of `backward` (Sec. 3: the list is expanded by
/// accumulation index before the frontier is taken).
const MICROSTEP_MARK: char = '@';

impl Schema {
    pub fn new(stages: Vec<String>) -> Result<Schema, SchemaError> {
        if stages.is_empty() {
            return Err(SchemaError::Empty);
        }
        for (i, name) in stages.iter().enumerate() {
            if name.trim().is_empty() {
                return Err(SchemaError::BlankName);
            }
            if stages[..i].contains(name) {
                return Err(SchemaError::Duplicate(name.clone()));
            }
        }
        Ok(Schema { stages })
    }

    pub fn stages(&self) -> &[String] {
        &self.stages
    }

    pub fn len(&self) -> usize {
        self.stages.len()
    }

    /// Never true: a schema has at least one stage.
    pub fn is_empty(&self) -> bool {
        self.stages.is_empty()
    }

    pub fn name(&self, stage: usize) -> &str {
        &self.stages[stage]
    }

    pub fn index(&self, name: &str) -> Option<usize> {
        self.stages.iter().position(|s| s == name)
    }

    /// How many distinct accumulation microsteps the stage names carry (`data@0`,
    /// `data@1`, ... count 2); 0 when no name has a microstep index.
    pub fn microsteps(&self) -> usize {
        let mut seen: Vec<u32> = Vec::new();
        for name in &self.stages {
            if let Some(k) = name.rsplit_once(MICROSTEP_MARK).and_then(|(_, k)| k.parse::<u32>().ok()) {
                if !seen.contains(&k) {
                    seen.push(k);
                }
            }
        }
        seen.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn rejects_empty_blank_and_duplicate_lists() {
        assert_eq!(Schema::new(Vec::new()), Err(SchemaError::Empty));
        assert_eq!(Schema::new(names(&["data", " "])), Err(SchemaError::BlankName));
        assert_eq!(Schema::new(names(&["data", "bwd", "data"])), Err(SchemaError::Duplicate("data".into())));
        let schema = Schema::new(names(&["data", "fwd", "bwd"])).unwrap();
        assert_eq!(schema.index("bwd"), Some(2));
        assert_eq!(schema.name(1), "fwd");
    }

    #[test]
    fn counts_accumulation_microsteps() {
        assert_eq!(Schema::new(names(&["data", "bwd"])).unwrap().microsteps(), 0);
        let unfolded = Schema::new(names(&["data@0", "bwd@0", "data@1", "bwd@1", "optim"])).unwrap();
        assert_eq!(unfolded.microsteps(), 2);
    }
}
