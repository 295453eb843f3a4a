//! Free text a client declares about a request: who it acts for (`actor`), its own request id,
//! and an operator's `reason`. Unlike names, any Unicode is allowed, but never a control
//! character: stored events must stay readable by every reader and printable in any log or
//! table, and a NUL is not even storable in PostgreSQL text.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize};

use crate::limits::MAX_TEXT_CHARS;
use crate::InvalidInput;

/// The C0 controls, DEL and the C1 controls: U+0000–U+001F and U+007F–U+009F.
pub fn is_control(c: char) -> bool {
    matches!(c, '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}')
}

fn check_text(field: &'static str, s: &str) -> Result<(), InvalidInput> {
    let chars = s.chars().count();
    if chars == 0 || chars > MAX_TEXT_CHARS {
        return Err(InvalidInput::Text {
            field,
            reason: format!("must be 1 to {MAX_TEXT_CHARS} characters long (got {chars})"),
        });
    }
    if let Some(bad) = s.chars().find(|c| is_control(*c)) {
        return Err(InvalidInput::Text {
            field,
            reason: format!(
                "contains the control character U+{:04X}; control characters \
                 (U+0000-U+001F, U+007F-U+009F) are not allowed",
                u32::from(bad)
            ),
        });
    }
    Ok(())
}

macro_rules! text_type {
    ($(#[$doc:meta])* $name:ident, $field:literal) => {
        $(#[$doc])*
        #[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            pub fn parse(s: &str) -> Result<Self, InvalidInput> {
                check_text($field, s)?;
                Ok(Self(s.to_owned()))
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }

            pub fn into_string(self) -> String {
                self.0
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

        impl From<$name> for String {
            fn from(value: $name) -> String {
                value.0
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                check_text($field, &s).map_err(serde::de::Error::custom)?;
                Ok(Self(s))
            }
        }
    };
}

text_type!(
    /// Who a client says it acts for: 1–256 characters, no control characters.
    Actor,
    "actor"
);

text_type!(
    /// The client's own id for a request, kept for the audit: 1–256 characters, no control
    /// characters.
    ClientRequestId,
    "request_id"
);

text_type!(
    /// Why an operator did something: 1–256 characters, no control characters.
    Reason,
    "reason"
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_refused() {
        for bad in [
            "ev\u{0}il",
            "ev\u{1e}il",
            "ev\u{1f}il",
            "line\nbreak",
            "tab\t",
            "\u{7f}",
            "next\u{85}line",
            "\u{9f}",
        ] {
            assert!(Actor::parse(bad).is_err(), "{bad:?}");
            assert!(ClientRequestId::parse(bad).is_err(), "{bad:?}");
            assert!(Reason::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn other_unicode_is_allowed() {
        for good in [
            "alice",
            "a\u{2028}b",
            "\u{a0}",
            "🦀 rustacean",
            "用户",
            "zero\u{200b}width",
            "e\u{301}",
            "x",
        ] {
            assert_eq!(Actor::parse(good).expect(good).as_str(), good);
            assert!(ClientRequestId::parse(good).is_ok(), "{good:?}");
            assert!(Reason::parse(good).is_ok(), "{good:?}");
        }
    }

    #[test]
    fn length_is_one_to_256_characters() {
        assert!(Actor::parse("").is_err());
        assert!(Actor::parse(&"a".repeat(256)).is_ok());
        assert!(Actor::parse(&"a".repeat(257)).is_err());
        // Characters, not bytes: 256 four-byte characters fit.
        assert!(Reason::parse(&"🦀".repeat(256)).is_ok());
        assert!(Reason::parse(&"🦀".repeat(257)).is_err());
    }

    #[test]
    fn deserialising_validates() {
        assert!(serde_json::from_str::<Actor>(r#""ops""#).is_ok());
        for bad in [r#""""#, r#""ev\u001eil""#, r#""a\u0000""#, r#""\u0085""#] {
            let error = serde_json::from_str::<ClientRequestId>(bad).expect_err(bad);
            assert!(error.to_string().contains("request_id"), "{error}");
        }
        assert!(serde_json::from_str::<Actor>(r#""a\u2028b""#).is_ok());
        let long = format!("\"{}\"", "x".repeat(257));
        assert!(serde_json::from_str::<Reason>(&long).is_err());
    }

    #[test]
    fn errors_name_the_field() {
        let error = Reason::parse("").expect_err("empty");
        assert!(error.to_string().contains("reason"), "{error}");
    }
}
