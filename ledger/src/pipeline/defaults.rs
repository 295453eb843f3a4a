//! The defaults stream (`$defaults`): its own writer lock, caught up from the store, and
//! published to the project decisions as an immutable copy.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use domain::{decide_defaults, Defaults, Limits, DEFAULTS_STREAM};

use super::encode::event_data;
use super::{Ledger, LedgerError};
use crate::store::{AppendResult, ExpectedVersion, Metadata, StreamAppend, MAX_READ_COUNT};

impl Ledger {
    /// The defaults as this process last saw them.
    pub fn defaults(&self) -> Arc<Defaults> {
        self.defaults
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Re-reads the defaults stream's tail; other nodes may have changed it.
    pub async fn refresh_defaults(&self) -> Result<Arc<Defaults>, LedgerError> {
        let mut defaults = self.defaults_writer.lock().await;
        self.catch_up_defaults(&mut defaults).await?;
        Ok(self.publish_defaults(&defaults))
    }

    /// Merges `limits` into the defaults; answers all defaults.
    pub async fn set_defaults(
        &self,
        limits: &Limits,
        meta: &Metadata,
    ) -> Result<Arc<Defaults>, LedgerError> {
        for _ in 0..=self.config.max_conflict_retries {
            let mut defaults = self.defaults_writer.lock().await;
            self.catch_up_defaults(&mut defaults).await?;
            let events = decide_defaults(limits, &defaults)?;
            let now = self.clock.now();
            let append = StreamAppend::new(
                DEFAULTS_STREAM,
                ExpectedVersion::from_version(defaults.version),
                events.iter().map(|e| event_data(e, meta, now)).collect(),
            );
            match self.appender.send(append, None).await? {
                AppendResult::Appended { .. } => {
                    for event in &events {
                        defaults.apply(event);
                    }
                    return Ok(self.publish_defaults(&defaults));
                }
                AppendResult::Conflict { .. } | AppendResult::LinkedFailed => {
                    self.stats.conflicts.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        Err(LedgerError::Contention {
            stream: DEFAULTS_STREAM.to_owned(),
            attempts: self.config.max_conflict_retries + 1,
        })
    }

    fn publish_defaults(&self, defaults: &Defaults) -> Arc<Defaults> {
        let published = Arc::new(defaults.clone());
        *self.defaults.write().unwrap_or_else(|p| p.into_inner()) = published.clone();
        published
    }

    async fn catch_up_defaults(&self, defaults: &mut Defaults) -> Result<(), LedgerError> {
        loop {
            let from = defaults.version.map_or(0, |v| v + 1);
            let events = self
                .store
                .read_stream(DEFAULTS_STREAM, from, MAX_READ_COUNT)
                .await?;
            let done = events.len() < MAX_READ_COUNT;
            for recorded in &events {
                let event = recorded.decode().map_err(|e| LedgerError::Undecodable {
                    stream: recorded.stream.clone(),
                    version: recorded.version,
                    message: e.to_string(),
                })?;
                defaults.apply(&event);
            }
            if done {
                return Ok(());
            }
        }
    }
}
