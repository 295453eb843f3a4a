//! The driver that sends each decision to a running server, and the check of the usage that
//! server reports after the run.
//!
//! Decisions go through the load's own connections ([`crate::http1`]), whose requests are put
//! together from parts made once; the setup and the check after the run go through
//! `client::Client`, as any other client of the API would.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use client::wire::{Reserve, SetDefaults, SetLimits, SetParent, UsageQuery};
use client::{Client, ClientError, StatusCode};
use domain::{Limits, ProjectId, ReservationId};
use serde::Deserialize;
use uuid::Uuid;

use crate::driver::{Answer, Driver};
use crate::http1::{Connections, Target};
use crate::workload::{BOOT, HOLD_SECONDS};

pub(crate) struct OverHttp {
    client: Client,
    decisions: Connections,
    /// The body of every reserve: a boot, held for [`HOLD_SECONDS`].
    reserve_body: Vec<u8>,
    conflicts: AtomicU64,
}

/// What the load reads of a granted decision's answer (the rest of the reservation is skipped).
#[derive(Deserialize)]
struct Granted {
    reservation_id: Uuid,
    position: u64,
}

impl OverHttp {
    /// A driver for `target`; its clients' connections are opened as they are first needed
    /// and kept open.
    pub(crate) fn new(
        target: &str,
        token: Option<String>,
        clients: usize,
    ) -> Result<OverHttp, String> {
        let decisions = Connections::new(Target::parse(target, token.as_deref())?);
        let client =
            Client::with_idle_connections(target, token, clients).map_err(|e| e.to_string())?;
        let reserve = Reserve {
            count: None,
            deltas: BOOT.iter().map(|(r, n)| (r.to_string(), *n)).collect(),
            expires_in: Some(i64::from(HOLD_SECONDS)),
            reservation_id: None,
            actor: Some("bench".into()),
            user: None,
        };
        Ok(OverHttp {
            client,
            decisions,
            reserve_body: serde_json::to_vec(&reserve).map_err(|e| e.to_string())?,
            conflicts: AtomicU64::new(0),
        })
    }

    /// Sends a decision's request and reads its answer as the load counts it.
    async fn decide(&self, request: Vec<u8>) -> Answer {
        let answer = match self.decisions.send(&request).await {
            Ok(answer) => answer,
            Err(error) => return Answer::Failed(error),
        };
        if (200..300).contains(&answer.status) {
            return match serde_json::from_slice::<Granted>(&answer.body) {
                Ok(granted) => Answer::Granted {
                    id: ReservationId(granted.reservation_id),
                    position: granted.position,
                },
                Err(error) => Answer::Failed(format!("a granted answer not understood: {error}")),
            };
        }
        if answer.status == 403 {
            return Answer::Denied;
        }
        // Both mean the store was busy: contention across nodes, or a conflict.
        if matches!(answer.status, 503 | 409) {
            self.conflicts.fetch_add(1, Ordering::Relaxed);
        }
        let status = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::BAD_GATEWAY);
        let text = String::from_utf8_lossy(&answer.body);
        Answer::Failed(ClientError::from_answer(status, &text).to_string())
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
        // A project id's alphabet (`A-Z a-z 0-9 . _ : -`) needs no escaping in a path.
        let path = format!("/v1/projects/{project}/reservations");
        let target = self.decisions.target();
        self.decide(target.request("POST", &path, Some(&self.reserve_body)))
            .await
    }

    async fn commit(&self, project: &ProjectId, id: ReservationId) -> Answer {
        let path = format!("/v1/projects/{project}/reservations/{}/commit", id.0);
        self.decide(self.decisions.target().request("POST", &path, None))
            .await
    }

    fn conflicts(&self) -> u64 {
        self.conflicts.load(Ordering::Relaxed)
    }
}
