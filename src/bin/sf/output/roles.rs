//! `sf roles` output: JSON as the report is, or for people the layout line, one line per
//! communicator (role, size, members, evidence and the names the job gave it) and the
//! rank → coordinates table.

use std::io::{self, Write};

use super::table::{self, Align};
use crate::cli::Format;
use stagefrontier::analysis::roles::{CommRole, Coords, Layout, Role};
use stagefrontier::report::roles::RolesReport;

pub fn write<W: Write>(format: Format, out: W, report: &RolesReport) -> io::Result<()> {
    super::report(format, out, report, human)
}

/// `tp=2 pp=4 dp=2`, and what a flat job is.
fn layout_line(layout: &Layout, flat: bool) -> String {
    let kind = if flat { " (data parallel on the world communicator)" } else { "" };
    format!("{}{kind}", layout.line())
}

fn human<W: Write>(out: &mut W, report: &RolesReport) -> io::Result<()> {
    let roles = &report.roles;
    if roles.communicators.is_empty() {
        return human_line!(out, "{}: no communicator was recorded: no layout to tell", report.dir);
    }
    human_line!(out, "{}: {} ranks, layout {}", report.dir, roles.world_size, layout_line(&roles.layout, roles.flat))?;
    for note in &roles.notes {
        human_line!(out, "note: {note}")?;
    }
    writeln!(out)?;
    let rows: Vec<Vec<String>> = roles
        .communicators
        .iter()
        .map(|c| {
            vec![
                format!("{:#018x}", c.comm_id),
                c.role.name().to_string(),
                c.members.len().to_string(),
                members(&c.members),
                evidence(c),
            ]
        })
        .collect();
    let columns = [
        ("COMM", Align::Left),
        ("ROLE", Align::Left),
        ("SIZE", Align::Right),
        ("MEMBERS", Align::Left),
        ("EVIDENCE", Align::Left),
    ];
    table::write(out, &columns, &rows)?;
    writeln!(out)?;
    let dims: Vec<Role> = Role::DIMENSIONS.into_iter().filter(|&r| roles.layout.size(r).is_some()).collect();
    let mut columns: Vec<(&str, Align)> = vec![("RANK", Align::Right)];
    columns.extend(dims.iter().map(|r| (column(*r), Align::Right)));
    let rows: Vec<Vec<String>> = roles
        .ranks
        .iter()
        .map(|c| {
            let mut row = vec![c.rank.to_string()];
            row.extend(dims.iter().map(|&r| coordinate(c, r)));
            row
        })
        .collect();
    table::write(out, &columns, &rows)
}

/// The evidence, then the names the job gave the group and whether they agree:
/// `...; named TENSOR_MODEL_PARALLEL_GROUP (agrees)`.
fn evidence(c: &CommRole) -> String {
    if c.names.is_empty() {
        return c.evidence.clone();
    }
    let verdict = match c.names_agree {
        Some(true) => " (agrees)",
        Some(false) => " (disagrees: the inference stands)",
        None => "",
    };
    format!("{}; named {}{verdict}", c.evidence, c.names.join(", "))
}

fn column(role: Role) -> &'static str {
    match role {
        Role::Tp => "TP",
        Role::Pp => "PP",
        Role::Dp => "DP",
        Role::Ep => "EP",
        Role::Cp => "CP",
        Role::World | Role::Other => "?",
    }
}

fn coordinate(c: &Coords, role: Role) -> String {
    let value = match role {
        Role::Tp => c.tp,
        Role::Pp => c.pp,
        Role::Dp => c.dp,
        Role::Ep => c.ep,
        Role::Cp => c.cp,
        Role::World | Role::Other => None,
    };
    value.map_or_else(|| "-".to_string(), |v| v.to_string())
}

/// `0,2,4` or, for long lists, `0,2,4,...,14`.
fn members(ranks: &[u32]) -> String {
    let text = |rs: &[u32]| rs.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
    if ranks.len() <= 8 {
        text(ranks)
    } else {
        format!("{},...,{}", text(&ranks[..3]), ranks[ranks.len() - 1])
    }
}
