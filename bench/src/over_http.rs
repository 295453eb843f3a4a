//! The driver that sends each decision to a running server, and the check of the usage that
//! server reports after the run.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use client::wire::{Reserve, SetDefaults, SetLimits, SetParent, Step, UsageQuery};
use client::{Client, ClientError};
use domain::{Limits, ProjectId, ReservationId};

use crate::driver::{Answer, Driver};
use crate::workload::{BOOT, HOLD_SECONDS};

pub(crate) struct OverHttp {
    client: Client,
    conflicts: AtomicU64,
}

impl OverHttp {
    /// A driver for `target`, keeping a connection per client open (and as many spare).
    pub(crate) fn new(
        target: &str,
        token: Option<String>,
        clients: usize,
    ) -> Result<OverHttp, String> {
        let client =
            Client::with_idle_connections(target, token, clients * 2).map_err(|e| e.to_string())?;
        Ok(OverHttp {
            client,
            conflicts: AtomicU64::new(0),
        })
    }

    fn answer(
        &self,
        result: Result<client::Answer<client::wire::Reservation>, ClientError>,
    ) -> Answer {
        match result {
            Ok(answer) => Answer::Granted {
                id: ReservationId(answer.body.reservation_id),
                position: answer.body.position,
            },
            Err(ClientError::Problem(problem)) if problem.status == 403 => Answer::Denied,
            Err(error) => {
                // Both mean the store was busy: contention across nodes, or a conflict.
                if matches!(error.status(), Some(503 | 409)) {
                    self.conflicts.fetch_add(1, Ordering::Relaxed);
                }
                Answer::Failed(error.to_string())
            }
        }
    }

    /// Compares the usage the server reports (once it reflects `max_position`) with what the
    /// acknowledged commits imply; prints each difference.
    pub(crate) async fn verify_usage(
        &self,
        projects: &[ProjectId],
        committed: &HashMap<ProjectId, u64>,
        max_position: u64,
    ) -> Result<bool, String> {
        let query = UsageQuery {
            at: None,
            min_position: Some(max_position),
        };
        let mut ok = true;
        for project in projects {
            let usage = match self.client.usage(project.as_str(), &query).await {
                Ok(answer) => answer.body,
                Err(error @ (ClientError::Problem(_) | ClientError::NotProblem { .. })) => {
                    eprintln!("verify: usage of {project}: {error}");
                    ok = false;
                    continue;
                }
                Err(error) => return Err(error.to_string()),
            };
            let boots = committed.get(project).copied().unwrap_or(0) as i64;
            for (resource, per_boot) in BOOT {
                let row = usage.resources.get(resource);
                let in_use = row.map_or(-1, |r| r.in_use);
                let reserved = row.map_or(-1, |r| r.reserved);
                if in_use != boots * per_boot || reserved != 0 {
                    eprintln!("verify: {project} {resource}: in_use {in_use} reserved {reserved}, acknowledged {boots} boots");
                    ok = false;
                }
                if let Some(headroom) = row.and_then(|r| r.headroom) {
                    ok &= headroom >= 0;
                }
            }
        }
        Ok(ok)
    }
}

#[async_trait]
impl Driver for OverHttp {
    async fn ensure_defaults(&self) -> Result<(), String> {
        let defaults = self.client.defaults().await.map_err(|e| e.to_string())?;
        let missing: SetDefaults = SetDefaults {
            limits: BOOT
                .iter()
                .filter(|(r, _)| !defaults.body.limits.contains_key(*r))
                .map(|(r, _)| (r.to_string(), -1))
                .collect(),
        };
        if !missing.limits.is_empty() {
            self.client
                .set_defaults(&missing)
                .await
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    async fn set_limits(&self, project: &ProjectId, limits: &Limits) -> Result<(), String> {
        let body = SetLimits {
            limits: limits
                .iter()
                .map(|(r, l)| (r.as_str().to_owned(), l.value()))
                .collect(),
            force: true,
        };
        self.client
            .set_limits(project.as_str(), &body)
            .await
            .map(|_| ())
            .map_err(|e| format!("PUT limits: {e}"))
    }

    async fn set_parent(&self, project: &ProjectId, parent: &ProjectId) -> Result<(), String> {
        let body = SetParent {
            parent: parent.as_str().to_owned(),
            force: true,
        };
        self.client
            .set_parent(project.as_str(), &body)
            .await
            .map(|_| ())
            .map_err(|e| format!("PUT parent: {e}"))
    }

    async fn reserve(&self, project: &ProjectId) -> Answer {
        let body = Reserve {
            count: None,
            deltas: BOOT.iter().map(|(r, n)| (r.to_string(), *n)).collect(),
            expires_in: Some(i64::from(HOLD_SECONDS)),
            reservation_id: None,
            actor: Some("bench".into()),
            user: None,
        };
        let result = self.client.reserve(project.as_str(), &body).await;
        self.answer(result)
    }

    async fn commit(&self, project: &ProjectId, id: ReservationId) -> Answer {
        let result = self
            .client
            .transition(project.as_str(), &id.to_string(), Step::Commit, None)
            .await;
        self.answer(result)
    }

    fn conflicts(&self) -> u64 {
        self.conflicts.load(Ordering::Relaxed)
    }
}
