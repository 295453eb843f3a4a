//! `quota projections status` (from the server) and `rebuild|verify`: the tools that open a
//! store directly. They are checking tools, so they open only a store that exists (a typo in a
//! path is an error, never a new empty store that verifies clean), and verify compares the views
//! with the events replayed by a path of their own.

use std::sync::Arc;

use ::projections::{Difference, Projections};
use client::wire::ProjectionStatus;
use client::Client;

use crate::output::Output;
use crate::{table, CliError};

/// Each view's progress, as the server reports it.
pub async fn status(client: &Client, out: Output) -> Result<(), CliError> {
    let answer = client.projections().await?;
    out.print(&answer, |views: &Vec<ProjectionStatus>| {
        let rows: Vec<Vec<String>> = views
            .iter()
            .map(|v| {
                vec![
                    v.name.clone(),
                    v.position.to_string(),
                    v.head.to_string(),
                    v.lag.to_string(),
                ]
            })
            .collect();
        table::render(&["NAME", "POSITION", "HEAD", "LAG"], &rows)
    });
    Ok(())
}

/// A difference as `quota projections verify --json` prints it.
#[derive(serde::Serialize)]
struct DifferenceRow<'a> {
    view: &'a str,
    project: &'a str,
    resource: &'a str,
    field: &'a str,
    stored: Option<i64>,
    expected: Option<i64>,
}

impl<'a> From<&'a Difference> for DifferenceRow<'a> {
    fn from(d: &'a Difference) -> Self {
        DifferenceRow {
            view: &d.view,
            project: &d.project,
            resource: &d.resource,
            field: &d.field,
            stored: d.stored,
            expected: d.expected,
        }
    }
}

/// Opens the views of the store at `url` for a checking tool: the store must exist (a typo in
/// a path is an error, never a new empty store that verifies clean).
async fn open_projections(url: &str, views_file: ViewsFile) -> Result<Arc<Projections>, CliError> {
    let store = ledger::store::open_existing(url)
        .await
        .map_err(|e| CliError::new(format!("cannot open store: {e}")))?;
    if views_file == ViewsFile::MustExist {
        require_sqlite_views(url)?;
    }
    Projections::open(store)
        .await
        .map_err(|e| CliError::new(format!("cannot open the views: {e}")))
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum ViewsFile {
    /// Rebuild: a missing views file is built from the events.
    MayBuild,
    /// Verify: see [`require_sqlite_views`].
    MustExist,
}

/// On SQLite the views are a file of their own, which opening would create and fill from the
/// events: a verify of views built a moment ago checks nothing, so verify wants them to exist.
fn require_sqlite_views(url: &str) -> Result<(), CliError> {
    use std::str::FromStr as _;
    if !url.starts_with("sqlite:") {
        return Ok(());
    }
    let Ok(options) = sqlx::sqlite::SqliteConnectOptions::from_str(url) else {
        return Ok(()); // the store's own open says what is wrong with the URL
    };
    let path = options.get_filename();
    let views = ::projections::sqlite_views_path(path);
    if !views.exists() {
        return Err(CliError::new(format!(
            "no views at {}: `quota projections rebuild --store {url}` builds them from the events",
            views.display()
        )));
    }
    Ok(())
}

fn check_projection_name(name: &Option<String>) -> Result<(), CliError> {
    match name {
        Some(name) if !::projections::PROJECTION_NAMES.contains(&name.as_str()) => {
            Err(CliError::new(format!(
                "no projection named {name:?}; known are {}",
                ::projections::PROJECTION_NAMES.join(", ")
            )))
        }
        _ => Ok(()),
    }
}

pub async fn rebuild(name: Option<String>, store: &str) -> Result<(), CliError> {
    check_projection_name(&name)?;
    let views = open_projections(store, ViewsFile::MayBuild).await?;
    let bar = crate::progress::rebuild_bar();
    let progress_bar = bar.clone();
    let progress = move |done: u64, total: u64| {
        progress_bar.set_length(total);
        progress_bar.set_position(done);
    };
    let result = views.rebuild(name.as_deref(), &progress).await;
    match result {
        Ok(()) => {
            bar.finish();
            println!(
                "rebuilt {} from {} events",
                name.as_deref().unwrap_or("all views"),
                bar.length().unwrap_or(0)
            );
            Ok(())
        }
        Err(error) => {
            bar.abandon();
            Err(CliError::new(format!("rebuild failed: {error}")))
        }
    }
}

pub async fn verify(name: Option<String>, store: &str, json_output: bool) -> Result<(), CliError> {
    check_projection_name(&name)?;
    let views = open_projections(store, ViewsFile::MustExist).await?;
    let compared: Vec<&str> = match &name {
        Some(name) => vec![name.as_str()],
        None => ::projections::PROJECTION_NAMES.to_vec(),
    };
    let mut differences = views
        .verify()
        .await
        .map_err(|e| CliError::new(format!("verify failed: {e}")))?;
    differences.retain(|d| compared.contains(&d.view.as_str()));
    if json_output {
        // A JSON array of the differences, as before: scripts read it; which views were
        // compared is the `--name` they passed.
        let rows: Vec<DifferenceRow> = differences.iter().map(DifferenceRow::from).collect();
        let text = serde_json::to_string(&rows)
            .map_err(|e| CliError::new(format!("verify failed: {e}")))?;
        println!("{text}");
    } else if differences.is_empty() {
        // The views are compared at the position they reached; say so when that is not the
        // head (a views file built afresh starts at 0, and the service fills it).
        let statuses = views
            .status()
            .await
            .map_err(|e| CliError::new(format!("verify failed: {e}")))?;
        let statuses = statuses
            .iter()
            .filter(|s| compared.contains(&s.name.as_str()));
        let reached = statuses.clone().map(|s| s.position).min().unwrap_or(0);
        let head = statuses.map(|s| s.head).max().unwrap_or(0);
        let matched = views_match_text(&compared);
        if reached < head {
            println!(
                "{matched} up to position {reached}; the log's head is {head} \
                 (the service applies the rest when it runs)"
            );
        } else {
            println!("{matched}");
        }
    } else {
        let show = |v: Option<i64>| v.map_or("-".to_owned(), |n| n.to_string());
        let rows: Vec<Vec<String>> = differences
            .iter()
            .map(|d| {
                vec![
                    d.view.clone(),
                    d.project.clone(),
                    d.resource.clone(),
                    d.field.clone(),
                    show(d.stored),
                    show(d.expected),
                ]
            })
            .collect();
        println!(
            "{}",
            table::render(
                &["VIEW", "PROJECT", "RESOURCE", "FIELD", "STORED", "EXPECTED"],
                &rows
            )
        );
    }
    if differences.is_empty() {
        Ok(())
    } else {
        Err(CliError::new(format!(
            "{} difference(s) between the events and the {}; `quota projections rebuild` repairs them",
            differences.len(),
            views_text(&compared)
        )))
    }
}

/// `the audit view` or `the usage and audit views`: which views a verify compared.
fn views_text(compared: &[&str]) -> String {
    match compared {
        [one] => format!("{one} view"),
        many => format!("{} views", many.join(" and ")),
    }
}

/// `the audit view matches the events` / `the usage and audit views match the events`.
fn views_match_text(compared: &[&str]) -> String {
    let verb = if compared.len() == 1 {
        "matches"
    } else {
        "match"
    };
    format!("the {} {verb} the events", views_text(compared))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_match_names_the_views_compared() {
        assert_eq!(
            super::views_match_text(&["audit"]),
            "the audit view matches the events"
        );
        assert_eq!(
            super::views_match_text(&["usage", "audit"]),
            "the usage and audit views match the events"
        );
    }
}
