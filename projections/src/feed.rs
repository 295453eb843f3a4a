//! Reading the global feed for the views: straight from the events table, only the columns
//! the views use, decoded once. (The store's `read_all` returns full `RecordedEvent`s; a
//! rebuild reads a million events, and skipping the columns and copies it does not need is
//! most of its speed.) Reading by `position > after` is gap-free for the same reason the
//! store's own feed is: positions are assigned and committed in one order.

use domain::{Event, Timestamp};
use ledger::Position;
use sqlx::Row as _;

use crate::db::{to_i64, to_u64, Db};
use crate::ProjectionError;

/// One decoded event of the feed.
#[derive(Clone, Debug)]
pub(crate) struct FeedEvent {
    pub position: Position,
    pub stream: String,
    pub version: u64,
    pub recorded_at: Timestamp,
    pub actor: Option<String>,
    pub request_id: Option<String>,
    pub principal: Option<String>,
    pub event: Event,
}

const COLUMNS: &str = "position, stream, version, event_type, schema_version, data, actor, request_id, recorded_at_ms, principal";

/// Events in (`after`, `until`], at most `max`, in position order. Undecodable events are
/// skipped (and logged) identically on every path, so views, rebuilds and verify agree; the
/// returned `last` is the last position read, skipped or not.
pub(crate) async fn read(
    db: &Db,
    after: Position,
    until: Position,
    max: usize,
) -> Result<(Vec<FeedEvent>, Option<Position>), ProjectionError> {
    let limit = i64::try_from(max).unwrap_or(i64::MAX);
    let mut events = Vec::with_capacity(max.min(16_384));
    let mut last = None;
    macro_rules! collect {
        ($rows:expr) => {
            for row in $rows {
                let position: i64 = row.try_get(0)?;
                last = Some(to_u64(position));
                let event_type: String = row.try_get(3)?;
                let schema_version: i64 = row.try_get(4)?;
                let data: String = row.try_get(5)?;
                let event = serde_json::from_str::<serde_json::Value>(&data)
                    .map_err(|e| e.to_string())
                    .and_then(|value| {
                        domain::decode(&event_type, u16::try_from(schema_version).unwrap_or(u16::MAX), &value).map_err(|e| e.to_string())
                    });
                let event = match event {
                    Ok(event) => event,
                    Err(error) => {
                        tracing::error!(position, %error, "skipping an unreadable event");
                        continue;
                    }
                };
                let recorded_at_ms: i64 = row.try_get(8)?;
                events.push(FeedEvent {
                    position: to_u64(position),
                    stream: row.try_get(1)?,
                    version: to_u64(row.try_get(2)?),
                    recorded_at: chrono::DateTime::from_timestamp_millis(recorded_at_ms).unwrap_or_default(),
                    actor: row.try_get(6)?,
                    request_id: row.try_get(7)?,
                    principal: row.try_get(9)?,
                    event,
                });
            }
        };
    }
    match db {
        Db::Sqlite {
            events: event_file, ..
        } => {
            // One row per page: SQLite joins the events into one string, which costs far less
            // than sqlx's per-row overhead (it dominated rebuilds). Fields are separated by
            // the ASCII unit separator and events by the record separator; neither can occur
            // raw in names or in JSON, which escapes control characters.
            let page: Option<String> = sqlx::query_scalar(
                "SELECT group_concat(line, char(30)) FROM (\
                 SELECT position || char(31) || stream || char(31) || version || char(31) || event_type \
                 || char(31) || schema_version || char(31) || recorded_at_ms || char(31) \
                 || coalesce(actor, '') || char(31) || coalesce(request_id, '') || char(31) \
                 || coalesce(principal, '') || char(31) || data AS line \
                 FROM events WHERE position > $1 AND position <= $2 ORDER BY position LIMIT $3)",
            )
            .bind(to_i64(after))
            .bind(to_i64(until))
            .bind(limit)
            .fetch_one(event_file)
            .await?;
            for line in page
                .as_deref()
                .unwrap_or("")
                .split('\u{1e}')
                .filter(|l| !l.is_empty())
            {
                let mut fields = line.splitn(10, '\u{1f}');
                let mut field = || fields.next().unwrap_or("");
                let (
                    position,
                    stream,
                    version,
                    event_type,
                    schema_version,
                    at_ms,
                    actor,
                    request_id,
                    principal,
                    data,
                ) = (
                    field(),
                    field(),
                    field(),
                    field(),
                    field(),
                    field(),
                    field(),
                    field(),
                    field(),
                    field(),
                );
                let number = |s: &str| {
                    s.parse::<i64>()
                        .map_err(|_| ProjectionError::CorruptView("unreadable event row".into()))
                };
                let position = number(position)?;
                last = Some(to_u64(position));
                let schema_version = u16::try_from(number(schema_version)?).unwrap_or(u16::MAX);
                let decoded = serde_json::from_str::<serde_json::Value>(data)
                    .map_err(|e| e.to_string())
                    .and_then(|value| {
                        domain::decode(event_type, schema_version, &value)
                            .map_err(|e| e.to_string())
                    });
                let event = match decoded {
                    Ok(event) => event,
                    Err(error) => {
                        tracing::error!(position, %error, "skipping an unreadable event");
                        continue;
                    }
                };
                let text = |s: &str| (!s.is_empty()).then(|| s.to_owned());
                events.push(FeedEvent {
                    position: to_u64(position),
                    stream: stream.to_owned(),
                    version: to_u64(number(version)?),
                    recorded_at: chrono::DateTime::from_timestamp_millis(number(at_ms)?)
                        .unwrap_or_default(),
                    actor: text(actor),
                    request_id: text(request_id),
                    principal: text(principal),
                    event,
                });
            }
        }
        Db::Postgres(pool) => {
            let columns = COLUMNS.replace("data,", "data::text AS data,").replace(
                "schema_version,",
                "schema_version::bigint AS schema_version,",
            );
            let rows = sqlx::query(&format!(
                "SELECT {columns} FROM events WHERE position > $1 AND position <= $2 ORDER BY position LIMIT $3"
            ))
            .bind(to_i64(after))
            .bind(to_i64(until))
            .bind(limit)
            .fetch_all(pool)
            .await?;
            collect!(rows);
        }
    }
    Ok((events, last))
}
