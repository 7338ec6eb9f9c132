//! Every `sf` command line shown in `--help` parses: the examples name real flags and
//! values (the integration tests run the ones a job can run).

use clap::CommandFactory;

use super::{parse_from, Cli};

/// The `sf ...` command lines of a help text: lines starting with `sf ` or `$ sf `, cut
/// at a pipe, redirection, `;` or the two spaces before a comment, split as a shell would
/// (quotes and `$(...)` kept together).
pub fn example_lines(help: &str) -> Vec<Vec<String>> {
    help.lines()
        .map(str::trim_start)
        .map(|line| line.strip_prefix("$ ").unwrap_or(line))
        .filter(|line| line.starts_with("sf "))
        .map(words)
        .collect()
}

fn words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut quote: Option<char> = None;
    let mut spaces = 0;
    for c in line.chars() {
        match (quote, c) {
            (Some(')'), ')') => {
                word.push(')');
                quote = None;
            }
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.push(c),
            (None, '\'' | '"') => quote = Some(c),
            // `$(id -u)` is one word.
            (None, '(') if word.ends_with('$') => {
                word.push('(');
                quote = Some(')');
            }
            (None, '|' | '>' | ';') => break,
            (None, ' ') => {
                spaces += 1;
                if !word.is_empty() {
                    words.push(std::mem::take(&mut word));
                }
            }
            (None, c) => {
                if spaces >= 2 && !words.is_empty() {
                    // Two spaces or more before a word: the comment column.
                    return words;
                }
                spaces = 0;
                word.push(c);
            }
        }
    }
    if !word.is_empty() {
        words.push(word);
    }
    words
}

#[test]
fn every_example_in_help_parses() {
    let root = Cli::command();
    let mut texts: Vec<(String, String)> =
        vec![("sf".into(), root.get_after_help().map(|h| h.to_string()).unwrap_or_default())];
    for sub in root.get_subcommands() {
        let help = [sub.get_after_help(), sub.get_long_about()].into_iter().flatten().map(|h| h.to_string());
        texts.push((sub.get_name().to_string(), help.collect::<Vec<_>>().join("\n")));
    }
    let mut seen = 0;
    for (name, help) in texts {
        for example in example_lines(&help) {
            seen += 1;
            if let Err(e) = parse_from(&example) {
                panic!("sf {name} --help shows `{}`, which does not parse: {e}", example.join(" "));
            }
        }
    }
    assert!(seen >= 25, "only {seen} examples found");
}

#[test]
fn every_command_taking_latest_shows_it_in_an_example() {
    let root = Cli::command();
    let mut taking = Vec::new();
    for sub in root.get_subcommands().filter(|sub| sub.get_arguments().any(|a| a.get_id() == "latest")) {
        taking.push(sub.get_name());
        let help = [sub.get_after_help(), sub.get_long_about()].into_iter().flatten().map(|h| h.to_string());
        let examples = example_lines(&help.collect::<Vec<_>>().join("\n"));
        assert!(
            examples.iter().any(|words| words.iter().any(|w| w == "--latest")),
            "sf {} --help has no example of --latest",
            sub.get_name()
        );
    }
    let one_job = ["ls", "frontier", "hang", "slow", "kernels", "net", "roles", "path", "steps", "snapshot", "trace"];
    assert_eq!(taking, one_job, "the commands that read one job take --latest");
}

#[test]
fn example_lines_cut_pipes_and_comments() {
    let help =
        "  sf ls JOBDIR --json | jq '.x'\n  $ sf hang /s-$(id -u)/j\n  sf net J; echo $?      3 stuck\n  sf a 'b c'  comment";
    let lines = example_lines(help);
    assert_eq!(
        lines,
        [
            vec!["sf", "ls", "JOBDIR", "--json"],
            vec!["sf", "hang", "/s-$(id -u)/j"],
            vec!["sf", "net", "J"],
            vec!["sf", "a", "b c"]
        ]
    );
}

#[test]
fn the_readme_summary_lists_every_command() {
    let readme = include_str!("../../../../docs/cli.md");
    let section = readme.split("\n## sf\n").nth(1).expect("docs/cli.md has a ## sf section");
    let summary = section.split("```").nth(1).expect("## sf starts with the command summary");
    for sub in Cli::command().get_subcommands() {
        let line = format!("sf {} ", sub.get_name());
        assert!(summary.lines().any(|l| l.starts_with(&line)), "docs/cli.md ## sf summary lacks `{line}`");
    }
}
