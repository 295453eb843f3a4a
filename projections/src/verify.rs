//! Verify: replay every event with the domain's own fold (`ProjectState::apply`,
//! `Defaults::apply`) and list every stored row of the views that differs. The replay reads
//! the events by a path of its own, stream by stream (`EventStore::stream_names` and
//! `read_stream`), not through the views' reader of the feed, and folds with the full
//! `ProjectState` rather than the views' fold: so a bug in the views' reader or fold shows as
//! a difference instead of being repeated by the check.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use domain::{
    Defaults, Event, ProjectId, ProjectState, ReservationId, ReservationStatus, DEFAULTS_STREAM,
};

use ledger::store::MAX_READ_COUNT;

use crate::checkpoint::{head_of, AUDIT, USAGE};
use crate::fold::{owner, Owner};
use crate::point_in_time::{decode, read_stream};
use crate::tables::NumberTable;
use crate::{Difference, Inner, ProjectionError};

type Key = (String, String);

/// Per project and resource, the numbers verify compares.
#[derive(Default)]
struct Numbers {
    in_use: BTreeMap<Key, i64>,
    limits: BTreeMap<Key, i64>,
    /// Sum of positive deltas of held reservations (whatever their expiry: expiry is applied
    /// at query time, so the stored holds must match exactly).
    held_reserved: BTreeMap<Key, i64>,
    /// Count of held and of committed reservations per project (resource "").
    held_count: BTreeMap<Key, i64>,
    committed_count: BTreeMap<Key, i64>,
}

fn add(map: &mut BTreeMap<Key, i64>, project: &str, resource: &str, value: i64) {
    let entry = map
        .entry((project.to_owned(), resource.to_owned()))
        .or_default();
    *entry = entry.saturating_add(value);
}

impl Inner {
    pub(crate) async fn verify(&self) -> Result<Vec<Difference>, ProjectionError> {
        // One snapshot of the stored views and their checkpoints.
        let mut tx = self.db.begin_read().await?;
        let heads = tx.heads().await?;
        let (Some(usage), Some(audit)) = (
            head_of(&heads, USAGE).cloned(),
            head_of(&heads, AUDIT).cloned(),
        ) else {
            return Err(ProjectionError::CorruptView(
                "projection bookkeeping rows are missing".into(),
            ));
        };
        let mut stored = Numbers::default();
        for (project, resource, value) in
            tx.all_numbers(NumberTable::InUse, usage.generation).await?
        {
            add(&mut stored.in_use, &project, &resource, value);
        }
        for (project, resource, value) in tx
            .all_numbers(NumberTable::Limits, usage.generation)
            .await?
        {
            add(&mut stored.limits, &project, &resource, value);
        }
        for r in tx.all_reservations(usage.generation).await? {
            if r.held {
                add(&mut stored.held_count, &r.project, "", 1);
                for (resource, delta) in r.kept.deltas.iter().filter(|(_, d)| *d > 0) {
                    add(
                        &mut stored.held_reserved,
                        &r.project,
                        resource.as_str(),
                        delta,
                    );
                }
            } else {
                add(&mut stored.committed_count, &r.project, "", 1);
            }
        }
        let stored_positions: BTreeSet<i64> = tx
            .audit_positions(audit.generation)
            .await?
            .into_iter()
            .collect();
        let stored_links: BTreeSet<(String, String)> = tx
            .all_parent_links(audit.generation)
            .await?
            .into_iter()
            .collect();
        tx.rollback().await?;

        // The replay, cut at each view's checkpoint.
        let mut defaults = Defaults::default();
        let mut projects: HashMap<String, (ProjectState, BTreeSet<ReservationId>)> = HashMap::new();
        let mut expected_positions = BTreeSet::new();
        // Each project's parent as its `ParentSet` events leave it, up to the audit's checkpoint.
        let mut expected_parents: BTreeMap<String, String> = BTreeMap::new();
        let until = usage.position.max(audit.position);
        let mut after = String::new();
        loop {
            let names = self.store.stream_names(&after, MAX_READ_COUNT).await?;
            for stream in &names {
                let owner = owner(stream);
                let project = match owner {
                    Owner::Other => continue,
                    Owner::Defaults => None,
                    Owner::Project(_) => match ProjectId::from_stream(stream) {
                        Some(id) => Some(id),
                        None => continue,
                    },
                };
                // A stream's versions are in position order: stop at the later checkpoint.
                for recorded in read_stream(&*self.store, stream).await? {
                    if recorded.position > until {
                        break;
                    }
                    let in_audit = recorded.position <= audit.position;
                    if in_audit {
                        expected_positions.insert(crate::db::to_i64(recorded.position));
                    }
                    let event = decode(&recorded)?;
                    if let (true, Event::ParentSet { parent, .. }, Some(id)) =
                        (in_audit, &event, &project)
                    {
                        match parent {
                            Some(parent) => expected_parents
                                .insert(id.as_str().to_owned(), parent.as_str().to_owned()),
                            None => expected_parents.remove(id.as_str()),
                        };
                    }
                    if recorded.position > usage.position {
                        continue;
                    }
                    match &project {
                        None => defaults.apply(&event),
                        Some(id) => {
                            let (state, ids) =
                                projects.entry(id.as_str().to_owned()).or_insert_with(|| {
                                    (ProjectState::new(id.clone()), BTreeSet::new())
                                });
                            if let Event::ReservationRequested { reservation_id, .. } = &event {
                                ids.insert(*reservation_id);
                            }
                            state.apply(&event, recorded.event.recorded_at);
                        }
                    }
                }
            }
            match names.last() {
                Some(last) if names.len() >= MAX_READ_COUNT => after = last.clone(),
                _ => break,
            }
        }
        let mut expected = Numbers::default();
        for (resource, limit) in &defaults.limits {
            add(
                &mut expected.limits,
                DEFAULTS_STREAM,
                resource.as_str(),
                limit.value(),
            );
        }
        for (project, (state, ids)) in &projects {
            for (resource, limit) in &state.overrides {
                add(
                    &mut expected.limits,
                    project,
                    resource.as_str(),
                    limit.value(),
                );
            }
            let mut resources: BTreeSet<String> = stored
                .in_use
                .keys()
                .filter(|(p, _)| p == project)
                .map(|(_, r)| r.clone())
                .collect();
            for id in ids {
                if let Some(r) = state.reservation(id) {
                    resources.extend(r.deltas.resources().map(|k| k.as_str().to_owned()));
                    match r.status {
                        ReservationStatus::Held => {
                            add(&mut expected.held_count, project, "", 1);
                            for (resource, delta) in r.deltas.iter().filter(|(_, d)| *d > 0) {
                                add(
                                    &mut expected.held_reserved,
                                    project,
                                    resource.as_str(),
                                    delta,
                                );
                            }
                        }
                        ReservationStatus::Committed => {
                            add(&mut expected.committed_count, project, "", 1)
                        }
                        ReservationStatus::Released(_) => {}
                    }
                }
            }
            for resource in resources {
                if let Ok(name) = domain::ResourceName::parse(&resource) {
                    add(
                        &mut expected.in_use,
                        project,
                        &resource,
                        state.in_use(&name),
                    );
                }
            }
        }

        let mut differences = Vec::new();
        compare(
            &mut differences,
            "in_use",
            &stored.in_use,
            &expected.in_use,
            true,
        );
        compare(
            &mut differences,
            "limit",
            &stored.limits,
            &expected.limits,
            false,
        );
        compare(
            &mut differences,
            "reserved_by_holds",
            &stored.held_reserved,
            &expected.held_reserved,
            true,
        );
        compare(
            &mut differences,
            "held_reservations",
            &stored.held_count,
            &expected.held_count,
            true,
        );
        compare(
            &mut differences,
            "committed_reservations",
            &stored.committed_count,
            &expected.committed_count,
            true,
        );
        // A parent link (project, parent) stored but not expected, or expected but not stored.
        let expected_links: BTreeSet<(String, String)> = expected_parents.into_iter().collect();
        for (project, parent) in stored_links.symmetric_difference(&expected_links) {
            let link = (project.clone(), parent.clone());
            differences.push(Difference {
                view: AUDIT.into(),
                project: project.clone(),
                resource: parent.clone(),
                field: "parent".into(),
                stored: stored_links.contains(&link).then_some(1),
                expected: expected_links.contains(&link).then_some(1),
            });
        }
        for position in stored_positions.symmetric_difference(&expected_positions) {
            differences.push(Difference {
                view: AUDIT.into(),
                project: String::new(),
                resource: String::new(),
                field: "position".into(),
                stored: stored_positions.contains(position).then_some(*position),
                expected: expected_positions.contains(position).then_some(*position),
            });
        }
        Ok(differences)
    }
}

/// Lists every key whose values differ; with `zero_is_absent`, a missing row equals 0.
fn compare(
    out: &mut Vec<Difference>,
    field: &str,
    stored: &BTreeMap<Key, i64>,
    expected: &BTreeMap<Key, i64>,
    zero_is_absent: bool,
) {
    let keys: BTreeSet<&Key> = stored.keys().chain(expected.keys()).collect();
    for key in keys {
        let (s, e) = (stored.get(key).copied(), expected.get(key).copied());
        let same = if zero_is_absent {
            s.unwrap_or(0) == e.unwrap_or(0)
        } else {
            s == e
        };
        if !same {
            out.push(Difference {
                view: USAGE.into(),
                project: key.0.clone(),
                resource: key.1.clone(),
                field: field.into(),
                stored: s,
                expected: e,
            });
        }
    }
}
