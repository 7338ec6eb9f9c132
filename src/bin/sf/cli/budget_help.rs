//! Help texts several commands share, as macros so `concat!` can splice them into their
//! `long_about` constants.

/// `sf ls`, `sf hang` and `sf net` share their help on the read budget
/// (`read_budget::RECORDS`).
macro_rules! read_budget_help {
    () => {
        "\
READ BUDGET: past 512 ranks of default logs, each log is read for its newest share of
SF_READ_BUDGET event records (default 33554432 over the whole job: 8,192 a rank at 4,096
ranks), so a big job is read in seconds: sf ls and sf net say what they left unread, and
sf hang keeps a quarter of its share as each rank's newest calls. Raise it to read
further back.
"
    };
}

/// `sf frontier` and `sf slow` share their help on the call budget (`read_budget::CALLS`).
macro_rules! call_budget_help {
    () => {
        "\
CALL BUDGET: the wait attribution holds the calls of every rank at once (32 bytes a
  call), so it reads at most SF_CALL_BUDGET calls over the whole job (default 16777216,
  512 MiB: every call of 256 default logs), each rank's newest share of it. When that
  leaves older calls unread, the analysis starts at the first step every rank's calls
  cover, and a note (\"call_window\" in --json) says which step, why, and the budget
  that would read every call held. A larger job sees its recent steps; raise
  SF_CALL_BUDGET to see further back, at 32 bytes and some reading time a call.
"
    };
}
