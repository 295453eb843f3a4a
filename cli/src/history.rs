//! `quota usage PROJECT --history`: each resource's usage over time as a sparkline of in_use +
//! reserved, with its min, max and last value and the limit, from the server's history
//! (`GET /v1/projects/{p}/usage/history`, a point per change).

use client::wire::{History, HistoryPoint, HistoryQuery, UsageQuery};
use client::Client;
use serde_json::Value;

use crate::output::{limit_text, Output};
use crate::{table, CliError};

/// Columns of a sparkline: time cut into this many equal slices.
pub const SPARKLINE_COLUMNS: usize = 40;

const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];

/// What `--history` was asked for.
pub struct HistoryArgs {
    /// Empty: every resource the project's usage shows.
    pub resources: Vec<String>,
    pub since: Option<String>,
    pub min_position: Option<u64>,
}

pub async fn usage_history(
    client: &Client,
    out: Output,
    project: &str,
    args: HistoryArgs,
) -> Result<(), CliError> {
    let resources = if args.resources.is_empty() {
        let query = UsageQuery {
            at: None,
            min_position: args.min_position,
        };
        let usage = client.usage(project, &query).await?;
        usage.body.resources.into_keys().collect()
    } else {
        args.resources
    };
    let mut histories = Vec::new();
    let mut json = Vec::new();
    for resource in resources {
        let query = HistoryQuery {
            resource,
            since: args.since.clone(),
            until: None,
            step: None,
            min_position: args.min_position,
        };
        let answer = client.history(project, &query).await?;
        json.push(answer.json);
        histories.push(answer.body);
    }
    if out.json {
        println!("{}", Value::Array(json));
    } else {
        println!("{}", history_table(project, &histories));
    }
    Ok(())
}

fn history_table(project: &str, histories: &[History]) -> String {
    let rows: Vec<Vec<String>> = histories
        .iter()
        .map(|history| {
            let used: Vec<i64> = history.points.iter().map(used).collect();
            let last = history.points.last();
            vec![
                history.resource.clone(),
                sparkline(&history.points, SPARKLINE_COLUMNS),
                used.iter().min().map_or_else(String::new, i64::to_string),
                used.iter().max().map_or_else(String::new, i64::to_string),
                last.map_or_else(String::new, used_text),
                last.map_or_else(String::new, |p| limit_text(p.limit)),
            ]
        })
        .collect();
    let headers = ["RESOURCE", "IN_USE+RESERVED", "MIN", "MAX", "NOW", "LIMIT"];
    let span = histories
        .first()
        .and_then(|h| Some((h.points.first()?, h.points.last()?)))
        .map_or_else(String::new, |(first, last)| {
            format!("{} from {} to {}; ", project, first.at, last.at)
        });
    format!(
        "{}\n({span}each column is 1/{SPARKLINE_COLUMNS} of the time, at the usage then)",
        table::render(&headers, &rows)
    )
}

fn used(point: &HistoryPoint) -> i64 {
    point.in_use.saturating_add(point.reserved)
}

fn used_text(point: &HistoryPoint) -> String {
    format!("{}+{}", point.in_use, point.reserved)
}

/// The points as `columns` bars, time cut into equal slices: each bar is the usage at its
/// slice's end (the last point at or before it), scaled from 0 to the highest usage.
pub fn sparkline(points: &[HistoryPoint], columns: usize) -> String {
    let times: Vec<i64> = points.iter().map(|p| millis(&p.at)).collect();
    let (Some(&first), Some(&last)) = (times.first(), times.last()) else {
        return String::new();
    };
    let columns = columns.max(1);
    let max = points.iter().map(used).max().unwrap_or(0).max(1);
    let span = (last - first).max(0);
    (0..columns)
        .map(|column| {
            let slice_end = first
                + span * i64::try_from(column + 1).unwrap_or(0)
                    / i64::try_from(columns).unwrap_or(1);
            let index = times.partition_point(|t| *t <= slice_end).saturating_sub(1);
            let value = used(&points[index]).max(0);
            let level = usize::try_from(value * 7 / max).unwrap_or(7).min(7);
            BARS[level]
        })
        .collect()
}

/// An answer's RFC 3339 time in milliseconds (0 if the server sent something else).
fn millis(at: &str) -> i64 {
    chrono::DateTime::parse_from_rfc3339(at).map_or(0, |t| t.timestamp_millis())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(at: &str, in_use: i64, reserved: i64) -> HistoryPoint {
        HistoryPoint {
            at: at.to_owned(),
            in_use,
            reserved,
            limit: 10,
        }
    }

    #[test]
    fn a_sparkline_cuts_time_evenly_and_scales_to_the_highest_usage() {
        let points = [
            point("2026-01-01T00:00:00.000Z", 0, 0),
            point("2026-01-01T00:00:01.000Z", 4, 0),
            point("2026-01-01T00:00:03.000Z", 4, 4),
            point("2026-01-01T00:00:04.000Z", 0, 0),
        ];
        // Slices end at 1, 2, 3 and 4 s: usage 4, 4, 8, 0.
        assert_eq!(sparkline(&points, 4), "▄▄█▁");
        assert_eq!(sparkline(&points, 8).chars().count(), 8);
        assert_eq!(sparkline(&[], 8), "");
        // One point: a flat line at its level.
        assert_eq!(sparkline(&points[1..2], 3), "███");
    }
}
