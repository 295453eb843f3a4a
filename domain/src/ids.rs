//! Validated identifiers. Every string that names something comes through here, so the rest of
//! the code never handles an unchecked name.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize};
use uuid::Uuid;

use crate::InvalidInput;

/// The characters SPEC.md allows in project ids and resource names.
fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-')
}

fn check_name(kind: &'static str, s: &str, max_len: usize) -> Result<(), InvalidInput> {
    if s.is_empty() || s.len() > max_len {
        return Err(InvalidInput::Name {
            kind,
            reason: format!("must be 1 to {max_len} characters long"),
        });
    }
    if let Some(bad) = s.chars().find(|c| !is_name_char(*c)) {
        return Err(InvalidInput::Name {
            kind,
            reason: format!("contains {bad:?}; allowed are A-Z a-z 0-9 . _ : -"),
        });
    }
    Ok(())
}

macro_rules! name_type {
    ($(#[$doc:meta])* $name:ident, $kind:literal, $max:expr) => {
        $(#[$doc])*
        #[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            pub const MAX_LEN: usize = $max;

            pub fn parse(s: &str) -> Result<Self, InvalidInput> {
                check_name($kind, s, Self::MAX_LEN)?;
                Ok(Self(s.to_owned()))
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl std::str::FromStr for $name {
            type Err = InvalidInput;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Self::parse(s)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                Self::parse(&s).map_err(serde::de::Error::custom)
            }
        }
    };
}

name_type!(
    /// A project (tenant): 1–128 characters of `A-Z a-z 0-9 . _ : -`.
    ProjectId,
    "project id",
    crate::limits::MAX_PROJECT_ID_CHARS
);

name_type!(
    /// A user inside a project (Nova's per-user quotas): the project id grammar.
    UserId,
    "user id",
    crate::limits::MAX_PROJECT_ID_CHARS
);

name_type!(
    /// A countable resource such as `instances` or `class:VCPU`: 1–64 characters.
    ResourceName,
    "resource name",
    crate::limits::MAX_RESOURCE_NAME_CHARS
);

impl ProjectId {
    /// The event stream that holds this project's history.
    pub fn stream(&self) -> String {
        // Built by hand: it is named on every decision, and `format!` costs several times more.
        let mut stream = String::with_capacity(PROJECT_STREAM_PREFIX.len() + self.0.len());
        stream.push_str(PROJECT_STREAM_PREFIX);
        stream.push_str(&self.0);
        stream
    }

    /// The project whose stream this is, if it is a project stream.
    pub fn from_stream(stream: &str) -> Option<ProjectId> {
        stream
            .strip_prefix(PROJECT_STREAM_PREFIX)
            .and_then(|id| ProjectId::parse(id).ok())
    }
}

pub const PROJECT_STREAM_PREFIX: &str = "project-";
/// The stream holding the default limits. Not a valid project stream name ('$' is not allowed).
pub const DEFAULTS_STREAM: &str = "$defaults";

/// A reservation id: a UUID, chosen by the client (for idempotent retries) or by the ledger.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ReservationId(pub Uuid);

impl ReservationId {
    pub fn parse(s: &str) -> Result<Self, InvalidInput> {
        Uuid::parse_str(s)
            .map(ReservationId)
            .map_err(|_| InvalidInput::ReservationId(s.chars().take(64).collect()))
    }
}

impl fmt::Display for ReservationId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.hyphenated().fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_accept_the_spec_alphabet() {
        assert!(ProjectId::parse("tenant-1.prod_a:x").is_ok());
        assert!(ResourceName::parse("class:VCPU").is_ok());
        assert!(ProjectId::parse(&"p".repeat(128)).is_ok());
        assert!(ResourceName::parse(&"r".repeat(64)).is_ok());
    }

    #[test]
    fn names_reject_everything_else() {
        for bad in ["", "a b", "a/b", "ü", "a$", "x\n"] {
            assert!(ProjectId::parse(bad).is_err(), "{bad:?}");
            assert!(ResourceName::parse(bad).is_err(), "{bad:?}");
        }
        assert!(ProjectId::parse(&"p".repeat(129)).is_err());
        assert!(ResourceName::parse(&"r".repeat(65)).is_err());
    }

    #[test]
    fn deserialising_validates() {
        assert!(serde_json::from_str::<ResourceName>("\"cores\"").is_ok());
        assert!(serde_json::from_str::<ResourceName>("\"co res\"").is_err());
    }

    #[test]
    fn project_streams_round_trip() {
        let p = ProjectId::parse("acme").unwrap();
        assert_eq!(p.stream(), "project-acme");
        assert_eq!(ProjectId::from_stream("project-acme"), Some(p));
        assert_eq!(ProjectId::from_stream(DEFAULTS_STREAM), None);
    }

    #[test]
    fn reservation_ids_are_uuids() {
        assert!(ReservationId::parse("0190f3a0-7b7e-7cc0-8000-000000000001").is_ok());
        assert!(ReservationId::parse("not-a-uuid").is_err());
    }
}
