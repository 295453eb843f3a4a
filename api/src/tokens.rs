//! The tokens file: one `TOKEN ROLE [NAME]` line per token (`#` starts a comment; a leading
//! byte order mark is ignored). Roles are `admin`, `auditor` and `project:{id}`; the optional
//! NAME (the grammar of project ids) is the principal recorded for the token's requests, its role
//! when absent. Tokens are at least 16 printable ASCII characters. Only SHA-256 hashes of the
//! tokens are kept, a presented token is compared with every stored hash in constant time, and no
//! token is ever logged or echoed: an error in the file names its line number, never its text
//! (a line with its columns swapped would otherwise print the secret). `SIGHUP` reloads the file
//! ([`TokenStore::reload`]); a file that does not parse leaves the tokens in force.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use domain::ProjectId;
use sha2::{Digest, Sha256};
use subtle::{ConditionallySelectable, ConstantTimeEq};

use crate::auth::{Caller, Role, ANONYMOUS, SYSTEM_PREFIX};
use crate::limits::MIN_TOKEN_CHARS;

/// What is wrong with a line of the tokens file. The messages never quote the line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LineError {
    #[error("expected `TOKEN ROLE [NAME]`")]
    Shape,
    #[error("the token is shorter than {MIN_TOKEN_CHARS} characters")]
    ShortToken,
    #[error("the token must be printable ASCII")]
    TokenCharacters,
    #[error("unknown role: use admin, auditor or project:ID")]
    UnknownRole,
    #[error("the project id of the role is invalid (1 to 128 of A-Z a-z 0-9 . _ : -)")]
    RoleProject,
    #[error("the name must be 1 to 128 characters of A-Z a-z 0-9 . _ : -")]
    Name,
    #[error("the name is reserved (`anonymous`, `system:...`)")]
    ReservedName,
    #[error("this token is already listed on line {0}")]
    Duplicate(usize),
}

#[derive(Debug, thiserror::Error)]
pub enum TokensFileError {
    #[error("cannot read tokens file {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("tokens file {path}, line {line}: {error}")]
    Line {
        path: String,
        line: usize,
        error: LineError,
    },
    #[error("tokens file {path} has no tokens")]
    Empty { path: String },
}

/// The name a tokens file gives a token: the principal of its requests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenName(String);

impl TokenName {
    pub fn parse(s: &str) -> Result<TokenName, LineError> {
        // The grammar of project ids: short, and nothing a log or a table could misread.
        ProjectId::parse(s).map_err(|_| LineError::Name)?;
        if s == ANONYMOUS || s.starts_with(SYSTEM_PREFIX) {
            return Err(LineError::ReservedName);
        }
        Ok(TokenName(s.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

type TokenHash = [u8; 32];

fn hash(token: &str) -> TokenHash {
    Sha256::digest(token.as_bytes()).into()
}

#[derive(Clone, Debug)]
struct TokenEntry {
    hash: TokenHash,
    role: Role,
    name: Option<TokenName>,
    line: usize,
}

/// The known tokens, by hash.
#[derive(Clone, Debug, Default)]
pub struct Tokens {
    entries: Vec<TokenEntry>,
}

fn parse_line(line: &str) -> Result<Option<(TokenHash, Role, Option<TokenName>)>, LineError> {
    let line = line.split('#').next().unwrap_or_default().trim();
    if line.is_empty() {
        return Ok(None);
    }
    let mut fields = line.split_whitespace();
    let (Some(token), Some(role), name, None) =
        (fields.next(), fields.next(), fields.next(), fields.next())
    else {
        return Err(LineError::Shape);
    };
    if !token.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(LineError::TokenCharacters);
    }
    if token.len() < MIN_TOKEN_CHARS {
        return Err(LineError::ShortToken);
    }
    let role = Role::parse(role)?;
    let name = name.map(TokenName::parse).transpose()?;
    Ok(Some((hash(token), role, name)))
}

impl Tokens {
    pub fn load(path: &Path) -> Result<Tokens, TokensFileError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| TokensFileError::Read {
            path: shown.clone(),
            source,
        })?;
        Tokens::parse(&text).map_err(|error| match error {
            Some((line, error)) => TokensFileError::Line {
                path: shown,
                line,
                error,
            },
            None => TokensFileError::Empty { path: shown },
        })
    }

    /// Parses `TOKEN ROLE [NAME]` lines. The error is the line number and what is wrong with
    /// it, or `None` for a file without tokens.
    pub fn parse(text: &str) -> Result<Tokens, Option<(usize, LineError)>> {
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        let mut entries: Vec<TokenEntry> = vec![];
        for (index, line) in text.lines().enumerate() {
            let number = index + 1;
            let Some((digest, role, name)) = parse_line(line).map_err(|e| Some((number, e)))?
            else {
                continue;
            };
            if let Some(first) = entries.iter().find(|entry| entry.hash == digest) {
                return Err(Some((number, LineError::Duplicate(first.line))));
            }
            entries.push(TokenEntry {
                hash: digest,
                role,
                name,
                line: number,
            });
        }
        if entries.is_empty() {
            return Err(None);
        }
        Ok(Tokens { entries })
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The caller `token` authenticates. Every stored hash is compared, in constant time,
    /// whatever matches.
    pub fn authenticate(&self, token: &str) -> Option<Caller> {
        let presented = hash(token);
        let mut found = subtle::Choice::from(0);
        let mut index = 0u64;
        for (i, entry) in self.entries.iter().enumerate() {
            let matches = entry.hash.ct_eq(&presented);
            index = u64::conditional_select(&index, &(i as u64), matches);
            found |= matches;
        }
        if bool::from(found) {
            usize::try_from(index)
                .ok()
                .and_then(|i| self.entries.get(i))
                .map(|entry| Caller::Token {
                    role: entry.role.clone(),
                    name: entry.name.clone(),
                })
        } else {
            None
        }
    }
}

/// The tokens in force, and the file they are (re)loaded from.
#[derive(Debug)]
pub struct TokenStore {
    path: PathBuf,
    current: RwLock<Arc<Tokens>>,
}

impl TokenStore {
    pub fn load(path: &Path) -> Result<TokenStore, TokensFileError> {
        let tokens = Tokens::load(path)?;
        Ok(TokenStore {
            path: path.to_owned(),
            current: RwLock::new(Arc::new(tokens)),
        })
    }

    /// Reads the file again and puts its tokens in force; on any error the tokens in force
    /// stay. Answers how many tokens are in force now.
    pub fn reload(&self) -> Result<usize, TokensFileError> {
        let tokens = Tokens::load(&self.path)?;
        let count = tokens.len();
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(tokens);
        Ok(count)
    }

    pub fn current(&self) -> Arc<Tokens> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// Reloads the tokens file on every `SIGHUP`, logging the outcome (never a line's text). On a
/// server without tokens a `SIGHUP` is logged and otherwise ignored (rather than ending it).
#[cfg(unix)]
pub async fn reload_on_hangup(tokens: Option<Arc<TokenStore>>) {
    use tokio::signal::unix::{signal, SignalKind};
    let mut hangups = match signal(SignalKind::hangup()) {
        Ok(hangups) => hangups,
        Err(error) => {
            tracing::warn!(%error, "cannot listen for SIGHUP; the tokens file will not reload");
            return;
        }
    };
    while hangups.recv().await.is_some() {
        let Some(store) = &tokens else {
            tracing::info!("SIGHUP: the server runs without tokens; nothing to reload");
            continue;
        };
        match store.reload() {
            Ok(count) => tracing::info!(tokens = count, "SIGHUP: reloaded the tokens file"),
            Err(error) => tracing::warn!(
                %error,
                "SIGHUP: the tokens file was not reloaded; the previous tokens stay in force"
            ),
        }
    }
}

#[cfg(not(unix))]
pub async fn reload_on_hangup(_tokens: Option<Arc<TokenStore>>) {}

#[cfg(test)]
mod tests {
    use super::*;

    const ADMIN: &str = "secret-admin-0123456789";
    const AUDITOR: &str = "secret-auditor-0123456789";
    const ACME: &str = "secret-acme-0123456789";

    fn role_of(tokens: &Tokens, token: &str) -> Option<Role> {
        match tokens.authenticate(token)? {
            Caller::Token { role, .. } => Some(role),
            Caller::Open => None,
        }
    }

    fn error_of(text: &str) -> String {
        match Tokens::parse(text) {
            Ok(_) => panic!("{text:?} parsed"),
            Err(Some((line, error))) => format!("line {line}: {error}"),
            Err(None) => "no tokens".into(),
        }
    }

    #[test]
    fn tokens_file_parses_roles_names_and_comments() {
        let tokens = Tokens::parse(&format!(
            "# operators\n{ADMIN} admin ops.alice\n{AUDITOR} auditor # read only\n\n\
             {ACME}\tproject:acme   acme-ci\n"
        ))
        .expect("valid file");
        assert_eq!(tokens.len(), 3);
        assert_eq!(role_of(&tokens, ADMIN), Some(Role::Admin));
        assert_eq!(role_of(&tokens, AUDITOR), Some(Role::Auditor));
        assert_eq!(
            role_of(&tokens, ACME),
            Some(Role::Project(ProjectId::parse("acme").expect("id")))
        );
        assert_eq!(tokens.authenticate("secret-nobody-0123456789"), None);
        assert_eq!(tokens.authenticate(""), None);
    }

    #[test]
    fn principal_is_the_name_else_the_role_else_anonymous() {
        let tokens = Tokens::parse(&format!(
            "{ADMIN} admin ops.alice\n{AUDITOR} auditor\n{ACME} project:acme\n"
        ))
        .expect("valid file");
        let principal = |token: &str| tokens.authenticate(token).expect(token).principal();
        assert_eq!(principal(ADMIN), "ops.alice");
        assert_eq!(principal(AUDITOR), "auditor");
        assert_eq!(principal(ACME), "project:acme");
        assert_eq!(Caller::Open.principal(), "anonymous");
        // The label (the default actor) stays the role's, whatever the name.
        assert_eq!(
            tokens
                .authenticate(ADMIN)
                .expect("admin")
                .label()
                .as_deref(),
            Some("admin")
        );
        assert_eq!(Caller::Open.label(), None);
    }

    #[test]
    fn a_leading_byte_order_mark_is_ignored() {
        let tokens = Tokens::parse(&format!("\u{feff}{ADMIN} admin\n")).expect("valid file");
        assert_eq!(role_of(&tokens, ADMIN), Some(Role::Admin));
        // Anywhere else it is part of the line (and not printable ASCII).
        assert!(Tokens::parse(&format!("{ADMIN} admin\n\u{feff}{ACME} auditor\n")).is_err());
    }

    #[test]
    fn tokens_are_at_least_16_printable_characters() {
        assert!(Tokens::parse("0123456789abcdef admin").is_ok());
        assert_eq!(
            error_of("0123456789abcde admin"),
            "line 1: the token is shorter than 16 characters"
        );
        assert!(error_of("x admin").contains("shorter"));
        assert!(error_of("0123456789abcdefé admin").contains("printable ASCII"));
    }

    #[test]
    fn names_follow_the_id_grammar_and_reserved_ones_are_refused() {
        for bad in ["a/b", "ali ce!", &"n".repeat(129), "é"] {
            let text = format!("{ADMIN} admin {bad}");
            assert!(Tokens::parse(&text).is_err(), "{bad:?}");
        }
        for reserved in ["anonymous", "system:sweeper", "system:x"] {
            let error = error_of(&format!("{ADMIN} admin {reserved}"));
            assert!(error.contains("reserved"), "{error}");
        }
    }

    #[test]
    fn tokens_file_errors_name_the_line_and_never_its_text() {
        let secret = "hunter2-hunter2-hunter2";
        for (bad, line) in [
            (format!("{secret} root"), 1),
            (secret.to_owned(), 1),
            (format!("{secret} admin name extra"), 1),
            (format!("{secret} admin bad/name"), 1),
            (format!("{secret} project:{secret}!"), 1),
            (format!("# swapped\nadmin {secret}"), 2),
            (
                format!("{ADMIN} admin\n{secret} admin\n{secret} auditor"),
                3,
            ),
        ] {
            let error = error_of(&bad);
            assert!(
                error.starts_with(&format!("line {line}: ")),
                "{bad:?}: {error}"
            );
            assert!(!error.contains("hunter2"), "{error}");
            assert!(!error.contains("root"), "{error}");
        }
        assert_eq!(error_of("# nothing\n"), "no tokens");
    }

    #[test]
    fn a_reload_replaces_the_tokens_and_a_bad_file_keeps_them() {
        let dir = tempfile::tempdir().expect("folder");
        let path = dir.path().join("tokens");
        std::fs::write(&path, format!("{ADMIN} admin\n{ACME} project:acme\n")).expect("write");
        let store = TokenStore::load(&path).expect("load");
        assert!(store.current().authenticate(ACME).is_some());

        std::fs::write(&path, format!("{ADMIN} admin\n")).expect("write");
        assert_eq!(store.reload().expect("reload"), 1);
        assert!(store.current().authenticate(ACME).is_none(), "revoked");

        std::fs::write(&path, format!("{ADMIN} admin\n{ACME} nobody\n")).expect("write");
        let error = store.reload().expect_err("bad file").to_string();
        assert!(error.contains("line 2") && !error.contains(ACME), "{error}");
        assert!(store.current().authenticate(ADMIN).is_some(), "kept");
    }
}
