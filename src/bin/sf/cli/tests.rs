//! The command table's own tests: each command line parses to its Command.

use super::*;
use clap::error::ErrorKind;
use stagefrontier::report::hang::DEFAULT_HANG;

fn parse(args: &[&str]) -> Result<Command, ErrorKind> {
    parse_from(args).map_err(|e| e.kind())
}

#[test]
fn ls_and_dump_with_and_without_json() {
    assert_eq!(parse(&["sf", "ls", "job"]), Ok(Command::Ls { path: Dirs::one("job"), format: Format::Human }));
    assert_eq!(parse(&["sf", "ls", "--json", "job"]), Ok(Command::Ls { path: Dirs::one("job"), format: Format::Json }));
    assert_eq!(
        parse(&["sf", "dump", "job/rank-00001.sflog", "--json"]),
        Ok(Command::Dump { file: "job/rank-00001.sflog".into(), options: Default::default(), format: Format::Json })
    );
}

#[test]
fn frontier_takes_a_csv_and_stage_options() {
    let options = FrontierOptions {
        source: FrontierSource::Csv("s.csv".into()),
        stages: Some(vec!["data".into(), "bwd".into()]),
        window: Some(50),
        residual: None,
        sync_wait: vec!["data".into()],
        accumulation: None,
    };
    let args = "sf frontier --csv s.csv --stages data,bwd --window 50 --sync-wait data";
    assert_eq!(parse(&args.split(' ').collect::<Vec<_>>()), Ok(Command::Frontier { options, format: Format::Human }));
    assert_eq!(parse(&["sf", "frontier"]), Err(ErrorKind::MissingRequiredArgument));
    assert_eq!(parse(&["sf", "frontier", "--csv", "s.csv", "--window", "0"]), Err(ErrorKind::ValueValidation));
    assert_eq!(parse(&["sf", "frontier", "--csv", "s.csv", "jobdir"]), Err(ErrorKind::ArgumentConflict));
    match parse(&["sf", "frontier", "jobdir", "--json"]) {
        Ok(Command::Frontier { options, format }) => {
            assert_eq!((options.source, format), (FrontierSource::Logs(Dirs::one("jobdir")), Format::Json))
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn hang_takes_a_directory_and_threshold_settings() {
    let defaults = DEFAULT_HANG;
    assert_eq!(
        parse(&["sf", "hang", "job"]),
        Ok(Command::Hang {
            dir: Dirs::one("job"),
            options: defaults,
            format: Format::Human,
            prometheus: None,
            stacks: false
        })
    );
    let custom = HangOptions { factor: 3.0, min_stuck_s: 1.0, fallback_stuck_s: 5.0 };
    assert_eq!(
        parse(&["sf", "hang", "job", "--json", "--factor", "3", "--min-stuck-s", "1", "--fallback-stuck-s=5"]),
        Ok(Command::Hang {
            dir: Dirs::one("job"),
            options: custom,
            format: Format::Json,
            prometheus: None,
            stacks: false
        })
    );
    assert_eq!(parse(&["sf", "hang"]), Err(ErrorKind::MissingRequiredArgument));
    for bad in ["--factor=-1", "--factor=NaN", "--min-stuck-s=inf", "--fallback-stuck-s=soon"] {
        assert_eq!(parse(&["sf", "hang", "job", bad]), Err(ErrorKind::ValueValidation), "{bad}");
    }
    assert_eq!(parse(&["sf", "hang", "--help"]), Err(ErrorKind::DisplayHelp));
}

#[test]
fn latest_picks_the_newest_job_where_a_command_reads_one() {
    let latest = |dir: &str| Dirs(vec![dir.into()], Pick::Latest);
    assert_eq!(
        parse(&["sf", "ls", "root", "--latest"]),
        Ok(Command::Ls { path: latest("root"), format: Format::Human })
    );
    match parse(&["sf", "frontier", "root", "--latest"]) {
        Ok(Command::Frontier { options, .. }) => assert_eq!(options.source, FrontierSource::Logs(latest("root"))),
        other => panic!("{other:?}"),
    }
    match parse(&["sf", "steps", "root", "--latest", "--csv"]) {
        Ok(Command::Steps { dir, .. }) => assert_eq!(dir, latest("root")),
        other => panic!("{other:?}"),
    }
    assert_eq!(parse(&["sf", "frontier", "--csv", "s.csv", "--latest"]), Err(ErrorKind::ArgumentConflict));
    assert_eq!(
        parse(&["sf", "hang", "--prometheus", "http://p:9090", "--job", "1", "--latest"]),
        Err(ErrorKind::ArgumentConflict)
    );
    // Reading one log, or watching every job, picks none.
    assert_eq!(parse(&["sf", "dump", "r.sflog", "--latest"]), Err(ErrorKind::UnknownArgument));
    assert_eq!(parse(&["sf", "exporter", "root", "--latest"]), Err(ErrorKind::UnknownArgument));
}

#[test]
fn usage_errors() {
    assert_eq!(parse(&["sf", "ls"]), Err(ErrorKind::MissingRequiredArgument));
    assert_eq!(parse(&["sf", "dump", "a", "b"]), Err(ErrorKind::UnknownArgument));
    assert_eq!(parse(&["sf", "frobnicate"]), Err(ErrorKind::InvalidSubcommand));
    assert_eq!(parse(&["sf", "ls", "x", "--yaml"]), Err(ErrorKind::UnknownArgument));
    assert_eq!(parse(&["sf"]), Err(ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand));
}

#[test]
fn help_and_version() {
    assert_eq!(parse(&["sf", "--help"]), Err(ErrorKind::DisplayHelp));
    assert_eq!(parse(&["sf", "ls", "--help"]), Err(ErrorKind::DisplayHelp));
    assert_eq!(parse(&["sf", "--version"]), Err(ErrorKind::DisplayVersion));
}

#[test]
fn version_names_the_format_this_reader_reads() {
    use stagefrontier::core::log::format::{FORMAT_VERSION, SCHEMA_VERSION};
    let expected = format!("(log format {FORMAT_VERSION}, record schema {SCHEMA_VERSION})");
    assert!(LONG_VERSION.ends_with(&expected), "{LONG_VERSION}");
}
