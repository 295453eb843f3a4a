//! Time, given to the domain as an argument. Millisecond precision: what the store keeps.

use std::sync::Mutex;

use chrono::{DurationRound, TimeDelta, Utc};
use domain::Timestamp;

pub trait Clock: Send + Sync + 'static {
    fn now(&self) -> Timestamp;
}

#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        truncate_to_ms(Utc::now())
    }
}

fn truncate_to_ms(t: Timestamp) -> Timestamp {
    t.duration_trunc(TimeDelta::milliseconds(1)).unwrap_or(t)
}

/// A clock that moves only when told to.
#[derive(Debug)]
pub struct ManualClock(Mutex<Timestamp>);

impl ManualClock {
    pub fn new(start: Timestamp) -> Self {
        ManualClock(Mutex::new(truncate_to_ms(start)))
    }

    pub fn advance(&self, by: TimeDelta) {
        let mut now = self.0.lock().unwrap_or_else(|p| p.into_inner());
        *now += by;
    }

    pub fn set(&self, to: Timestamp) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = truncate_to_ms(to);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        *self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}
