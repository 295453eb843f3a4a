//! Printing an answer: the server's JSON verbatim with `--json`, else a table for people.

use client::wire::Amounts;
use client::Answer;

/// How answers are printed.
#[derive(Clone, Copy)]
pub struct Output {
    pub json: bool,
}

impl Output {
    /// Prints the answer as the server sent it (`--json`), or as `human` renders its body.
    pub fn print<T>(&self, answer: &Answer<T>, human: impl FnOnce(&T) -> String) {
        if self.json {
            println!("{}", answer.json);
        } else {
            println!("{}", human(&answer.body));
        }
    }
}

/// `-` for a value the server left empty.
pub fn or_dash(value: Option<impl ToString>) -> String {
    value.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

/// A limit as people read it: the wire's -1 is `unlimited` in every table (`--json` keeps -1).
pub fn limit_text(limit: i64) -> String {
    if limit == -1 {
        "unlimited".to_owned()
    } else {
        limit.to_string()
    }
}

/// `instances=1 cores=2`.
pub fn pairs_text(amounts: &Amounts) -> String {
    amounts
        .iter()
        .map(|(name, amount)| format!("{name}={amount}"))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    #[test]
    fn minus_one_reads_unlimited() {
        assert_eq!(super::limit_text(-1), "unlimited");
        assert_eq!(super::limit_text(0), "0");
        assert_eq!(super::limit_text(20), "20");
    }
}
