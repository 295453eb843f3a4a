//! The values of `quota`'s arguments that clap cannot check by their type: RESOURCE=NUMBER
//! pairs, a count range, and project and user ids.

use std::fmt;

/// `MIN:MAX` of `reserve --count`.
pub(super) fn parse_count(s: &str) -> Result<(u32, u32), String> {
    let (min, max) = s
        .split_once(':')
        .ok_or_else(|| format!("expected MIN:MAX, like 1:5, not {s:?}"))?;
    let number = |n: &str| {
        n.trim()
            .parse::<u32>()
            .map_err(|_| format!("{n:?} is not a count (a whole number from 1 to 10000)"))
    };
    Ok((number(min)?, number(max)?))
}

/// The longest project (and user) id: SPEC's "Words".
const MAX_ID_CHARS: usize = 128;

/// Checks an id of the project id grammar, 1-128 characters of A-Z a-z 0-9 . _ : -, so that a
/// typo is refused before anything is sent, in the server's words. `kind` names it.
fn check_id(kind: &str, s: &str) -> Result<(), String> {
    let length = s.chars().count();
    if length == 0 || length > MAX_ID_CHARS {
        return Err(format!(
            "invalid {kind} id: must be 1 to {MAX_ID_CHARS} characters long (got {length})"
        ));
    }
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-');
    if let Some(bad) = s.chars().find(|c| !allowed(*c)) {
        return Err(format!(
            "invalid {kind} id: contains {bad:?}; allowed are A-Z a-z 0-9 . _ : -"
        ));
    }
    Ok(())
}

/// A project id that the command line checked (see [`parse_project`]): only a valid one is
/// ever sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProjectId(String);

impl ProjectId {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ProjectId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A PROJECT (or a PARENT): 1-128 characters of A-Z a-z 0-9 . _ : -.
pub(super) fn parse_project(s: &str) -> Result<ProjectId, String> {
    check_id("project", s)?;
    Ok(ProjectId(s.to_owned()))
}

/// A `--user`: the project id grammar.
pub(super) fn parse_user(s: &str) -> Result<String, String> {
    check_id("user", s)?;
    Ok(s.to_owned())
}

pub(super) fn parse_pair(s: &str) -> Result<(String, i64), String> {
    let (name, value) = s
        .split_once('=')
        .ok_or_else(|| format!("expected RESOURCE=NUMBER, got {s:?}"))?;
    let value = value
        .parse::<i64>()
        .map_err(|e| format!("{name}: {value:?} is not a 64-bit integer: {e}"))?;
    Ok((name.to_owned(), value))
}

#[cfg(test)]
mod tests {
    #[test]
    fn project_ids_are_checked_in_the_servers_words() {
        for good in ["acme", "a", "tenant-1.prod_a:x", &"p".repeat(128)] {
            let id = super::parse_project(good).expect(good);
            assert_eq!((id.as_str(), id.to_string()), (good, good.to_owned()));
        }
        assert_eq!(
            super::parse_project(""),
            Err("invalid project id: must be 1 to 128 characters long (got 0)".to_owned())
        );
        assert_eq!(
            super::parse_project(&"p".repeat(129)),
            Err("invalid project id: must be 1 to 128 characters long (got 129)".to_owned())
        );
        assert_eq!(
            super::parse_project("acme/dev"),
            Err("invalid project id: contains '/'; allowed are A-Z a-z 0-9 . _ : -".to_owned())
        );
    }

    #[test]
    fn user_ids_have_the_project_id_grammar() {
        for good in ["alice", "a", "tenant-1.prod_a:x", &"u".repeat(128)] {
            assert_eq!(super::parse_user(good).as_deref(), Ok(good));
        }
        assert_eq!(
            super::parse_user(""),
            Err("invalid user id: must be 1 to 128 characters long (got 0)".to_owned())
        );
        assert_eq!(
            super::parse_user(&"u".repeat(129)),
            Err("invalid user id: must be 1 to 128 characters long (got 129)".to_owned())
        );
        for (bad, char) in [
            ("al ice", "' '"),
            ("a/b", "'/'"),
            ("é", "'é'"),
            ("x\n", "'\\n'"),
        ] {
            let message = super::parse_user(bad).expect_err(bad);
            assert_eq!(
                message,
                format!("invalid user id: contains {char}; allowed are A-Z a-z 0-9 . _ : -")
            );
        }
    }
}
