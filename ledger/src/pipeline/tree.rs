//! Decisions whose consistency boundary spans a project's chain of ancestors (SPEC rule 11).
//!
//! A reserve in a child reads each ancestor's subtree usage, and every change of a child's
//! usage is recorded in each ancestor's stream too (`Descendant*` events). So such a decision
//! locks the slots of the project and its ancestors, decides on their cached states, and
//! appends to all of them as one linked chain, each append with its stream's expected version:
//! written whole or not at all. A decision that changes nothing still checks every version it
//! read, in the same chain.
//!
//! Slots are locked in project-id order, whatever the chain's shape, so two decisions never
//! wait on each other in a cycle. The chain is read first (each slot briefly), then locked,
//! then read again under the locks: if it moved meanwhile, the decision starts over.
//! Work that reads no ancestor (limits, reads, a root project's reserves) never takes these
//! locks, so a busy parent does not hold up its children's other work.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use domain::{
    decide_in_tree, decide_parent, Command, Decision, Event, ProjectId, ProjectState, Refusal,
    MAX_ANCESTORS,
};
use tokio::sync::MutexGuard;

use super::answers::Granted;
use super::appender::Fence;
use super::cache::{Slot, SlotState};
use super::execute::{Executed, Written};
use super::{Ledger, LedgerError};
use crate::store::{AppendResult, ExpectedVersion, Metadata, StreamAppend};

/// A command that reads the ancestors (a reserve, and a release that gives usage back) or
/// whose events they must record (every change of usage).
pub(super) fn reads_ancestors(command: &Command) -> bool {
    matches!(
        command,
        Command::Reserve { .. }
            | Command::Commit { .. }
            | Command::Release { .. }
            | Command::Expire
            | Command::CorrectUsage { .. }
    )
}

/// The slots of several projects, locked in project-id order, each current for its epoch.
struct Locked<'a> {
    /// In the order asked for.
    projects: Vec<ProjectId>,
    guards: Vec<MutexGuard<'a, SlotState>>,
    fences: Vec<(Arc<Slot>, u64)>,
}

impl Locked<'_> {
    fn state(&self, project: &ProjectId) -> &ProjectState {
        let index = self.index(project);
        &self.guards[index].state
    }

    fn index(&self, project: &ProjectId) -> usize {
        self.projects
            .iter()
            .position(|p| p == project)
            .expect("only locked projects are asked for")
    }

    /// Whether `chain` is still each project's parent link, from its first project up.
    fn holds_chain(&self, chain: &[ProjectId]) -> bool {
        chain.iter().enumerate().all(|(i, project)| {
            let parent = self.state(project).parent.as_ref();
            match chain.get(i + 1) {
                Some(next) => parent == Some(next),
                // The last one's parent is not followed: there is none, or the chain is full.
                None => parent.is_none() || chain.len() > MAX_ANCESTORS,
            }
        })
    }
}

/// The events decided for each locked project, with the version its state was at.
struct Planned {
    appends: Vec<StreamAppend>,
    fences: Vec<Option<Fence>>,
}

impl Ledger {
    /// The project and its ancestors, nearest first, as the cached states say now (each slot
    /// locked only while it is read). At most `1 + MAX_ANCESTORS`; a repeat ends it.
    async fn chain_of(&self, project: &ProjectId) -> Result<Vec<ProjectId>, LedgerError> {
        let mut chain = vec![project.clone()];
        while chain.len() <= MAX_ANCESTORS {
            let at = chain.last().expect("never empty");
            let slot = self.cache.slot(at);
            let epoch = slot.epoch.load(Ordering::SeqCst);
            let parent = self
                .lock_current(at, &slot, epoch)
                .await?
                .state
                .parent
                .clone();
            match parent {
                Some(parent) if !chain.contains(&parent) => chain.push(parent),
                _ => break,
            }
        }
        Ok(chain)
    }

    /// Locks the slots of `projects` in id order, each brought up to date for its epoch.
    async fn lock_all<'a>(
        &self,
        projects: &[ProjectId],
        slots: &'a [Arc<Slot>],
    ) -> Result<Locked<'a>, LedgerError> {
        let epochs: Vec<u64> = slots
            .iter()
            .map(|s| s.epoch.load(Ordering::SeqCst))
            .collect();
        let mut order: Vec<usize> = (0..projects.len()).collect();
        order.sort_by(|a, b| projects[*a].cmp(&projects[*b]));
        let mut guards: Vec<Option<MutexGuard<'a, SlotState>>> =
            (0..projects.len()).map(|_| None).collect();
        for i in order {
            guards[i] = Some(
                self.lock_current(&projects[i], &slots[i], epochs[i])
                    .await?,
            );
        }
        Ok(Locked {
            projects: projects.to_vec(),
            guards: guards
                .into_iter()
                .map(|g| g.expect("every slot locked"))
                .collect(),
            fences: slots.iter().cloned().zip(epochs).collect(),
        })
    }

    /// Decides `command` for a project with a parent: on its state and its ancestors', with
    /// the events and version checks of all of them appended as one linked chain.
    pub(super) async fn execute_in_tree(
        &self,
        project: &ProjectId,
        command: &Command,
        meta: &Metadata,
    ) -> Result<Executed, LedgerError> {
        let mut defaults_refreshed = false;
        let mut attempts = 0;
        while attempts <= self.config.max_conflict_retries {
            attempts += 1;
            let chain = self.chain_of(project).await?;
            let slots: Vec<Arc<Slot>> = chain.iter().map(|p| self.cache.slot(p)).collect();
            let own_events;
            let (answer, reply, own_epoch) = {
                let mut locked = self.lock_all(&chain, &slots).await?;
                if !locked.holds_chain(&chain) {
                    continue;
                }
                let defaults = self.defaults();
                let now = self.clock.now();
                let expected = versions(&locked);
                let Decision { events, answer } = {
                    let ancestors: Vec<&ProjectState> =
                        chain[1..].iter().map(|p| locked.state(p)).collect();
                    decide_in_tree(command, locked.state(project), &ancestors, &defaults, now)
                };
                if matches!(answer, Err(Refusal::UnknownResource(_))) && !defaults_refreshed {
                    drop(locked);
                    defaults_refreshed = true;
                    attempts -= 1;
                    self.refresh_defaults().await?;
                    continue;
                }
                let mut mirrored = vec![];
                let own = &mut locked.guards[0].state;
                for event in &events {
                    mirrored.extend(own.apply_for_ancestors(event, now));
                }
                // Each ancestor's cached state records the mirror events as its stream will, so
                // it stays at the version the chain writes (and a snapshot due is of that state).
                for ancestor in &mut locked.guards[1..] {
                    for event in &mirrored {
                        ancestor.state.apply(event, now);
                    }
                }
                let mut decided = vec![events];
                decided.extend(chain[1..].iter().map(|_| mirrored.clone()));
                let answer = answer.map(|o| Granted::of(o, &locked.guards[0].state, &defaults));
                own_events = decided[0].clone();
                let planned = self.plan(&mut locked, &expected, decided, meta, now);
                self.stats.decisions.fetch_add(1, Ordering::Relaxed);
                let reply = self
                    .appender
                    .enqueue_chain(planned.appends, planned.fences)
                    .await?;
                (answer, reply, locked.fences[0].1)
            };
            let results = reply.await.map_err(|_| LedgerError::ShuttingDown)??;
            match Self::written(project, results) {
                Some(written) => {
                    self.note_positions(&slots[0], own_epoch, &own_events, &written)
                        .await;
                    return Ok(Executed { answer, written });
                }
                None => self.after_conflict(attempts).await,
            }
        }
        Err(LedgerError::Contention {
            stream: project.stream(),
            attempts: self.config.max_conflict_retries + 1,
        })
    }

    /// Sets (or, with `None`, removes) the project's parent (SPEC rule 11); answers the
    /// project's ancestors after it, nearest first.
    pub async fn set_parent(
        &self,
        project: &ProjectId,
        parent: Option<ProjectId>,
        force: bool,
        meta: &Metadata,
    ) -> Result<Vec<ProjectId>, LedgerError> {
        let mut attempts = 0;
        while attempts <= self.config.max_conflict_retries {
            attempts += 1;
            let old = self.chain_of(project).await?;
            let new = match &parent {
                Some(parent) => self.chain_of(parent).await?,
                None => vec![],
            };
            let mut all = old.clone();
            all.extend(new.iter().filter(|p| !old.contains(p)).cloned());
            let slots: Vec<Arc<Slot>> = all.iter().map(|p| self.cache.slot(p)).collect();
            let reply = {
                let mut locked = self.lock_all(&all, &slots).await?;
                if !locked.holds_chain(&old) || !locked.holds_chain(&new) {
                    continue;
                }
                let defaults = self.defaults();
                let now = self.clock.now();
                let expected = versions(&locked);
                let decision = {
                    let state = locked.state(project);
                    let old: Vec<&ProjectState> =
                        old[1..].iter().map(|p| locked.state(p)).collect();
                    let new: Vec<&ProjectState> = new.iter().map(|p| locked.state(p)).collect();
                    decide_parent(state, &old, &new, force, &defaults, now)?
                };
                let mut decided: Vec<Vec<Event>> = all.iter().map(|_| vec![]).collect();
                decided[0] = decision.own;
                for (ancestor, events) in decision.ancestors {
                    decided[locked.index(&ancestor)] = events;
                }
                for (i, events) in decided.iter().enumerate() {
                    for event in events {
                        locked.guards[i].state.apply(event, now);
                    }
                }
                let planned = self.plan(&mut locked, &expected, decided, meta, now);
                self.stats.decisions.fetch_add(1, Ordering::Relaxed);
                self.appender
                    .enqueue_chain(planned.appends, planned.fences)
                    .await?
            };
            let results = reply.await.map_err(|_| LedgerError::ShuttingDown)??;
            if Self::written(project, results).is_some() {
                return Ok(new);
            }
            self.after_conflict(attempts).await;
        }
        Err(LedgerError::Contention {
            stream: project.stream(),
            attempts: self.config.max_conflict_retries + 1,
        })
    }

    /// The appends of a decision over locked projects: each project's events (already applied
    /// to its state) under the version it was read at, or a bare version check.
    fn plan(
        &self,
        locked: &mut Locked<'_>,
        expected: &[ExpectedVersion],
        decided: Vec<Vec<Event>>,
        meta: &Metadata,
        now: domain::Timestamp,
    ) -> Planned {
        let appends = decided
            .iter()
            .enumerate()
            .map(|(i, events)| {
                let slot = &locked.fences[i].0;
                self.append_of(slot, &mut locked.guards[i], expected[i], events, meta, now)
            })
            .collect();
        let fences = locked
            .fences
            .iter()
            .map(|(slot, epoch)| {
                Some(Fence {
                    slot: slot.clone(),
                    epoch: *epoch,
                })
            })
            .collect();
        Planned { appends, fences }
    }

    /// What the chain wrote for its first project, once every append of it is durable; `None`
    /// if any conflicted (none of it was written: decide again).
    fn written(project: &ProjectId, results: Vec<AppendResult>) -> Option<Written> {
        if results.iter().any(AppendResult::is_conflict) {
            tracing::debug!(%project, "conflict in a linked chain; deciding again");
            return None;
        }
        match results.into_iter().next() {
            Some(AppendResult::Appended {
                versions,
                positions,
                ..
            }) => Some(Written::new(versions, positions)),
            _ => unreachable!("a chain has a first append, and conflicts were handled above"),
        }
    }

    /// The project and its ancestors' states, nearest first, as they durably stand (for
    /// advice that records nothing, as a dry run: not one atomic read).
    pub(super) async fn ancestor_states(
        &self,
        project: &ProjectId,
    ) -> Result<Vec<ProjectState>, LedgerError> {
        let chain = self.chain_of(project).await?;
        let mut states = Vec::with_capacity(chain.len() - 1);
        for ancestor in &chain[1..] {
            states.push(self.project_state(ancestor).await?);
        }
        Ok(states)
    }

    /// The project's ancestors, nearest first, as they durably stand.
    pub async fn ancestors(&self, project: &ProjectId) -> Result<Vec<ProjectId>, LedgerError> {
        let mut chain = vec![];
        let mut at = self.read(project, |s, _| s.parent.clone()).await?;
        while let Some(parent) = at.take() {
            if chain.contains(&parent) || chain.len() > MAX_ANCESTORS {
                break;
            }
            at = self.read(&parent, |s, _| s.parent.clone()).await?;
            chain.push(parent);
        }
        Ok(chain)
    }
}

/// Each locked project's expected version: the one its state was read at.
fn versions(locked: &Locked<'_>) -> Vec<ExpectedVersion> {
    locked
        .guards
        .iter()
        .map(|g| ExpectedVersion::from_version(g.state.version))
        .collect()
}
