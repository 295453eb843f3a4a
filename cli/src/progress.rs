//! The progress bar of `quota projections rebuild`: on one line of an 80-column terminal, with
//! whole events per second (indicatif's own `{per_sec}` prints `90,803.5647/s`).

use std::fmt::Write as _;

use indicatif::{ProgressBar, ProgressState, ProgressStyle};

/// The bar takes the width the text leaves (`wide_bar`), so the line never wraps; the text
/// alone stays under 60 columns even at millions of events.
const TEMPLATE: &str = "{spinner} rebuilding [{wide_bar}] {pos}/{len} events, {rate}, ETA {eta}";

/// A bar for a rebuild; its length is set once the number of events is known.
pub fn rebuild_bar() -> ProgressBar {
    let bar = ProgressBar::new(0);
    bar.set_style(rebuild_style());
    bar
}

fn rebuild_style() -> ProgressStyle {
    ProgressStyle::with_template(TEMPLATE)
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ")
        .with_key(
            "rate",
            |state: &ProgressState, out: &mut dyn std::fmt::Write| {
                let _ = out.write_str(&rate_text(state.per_sec()));
            },
        )
}

/// `90804/s`: whole events per second (0 before there is a rate to speak of).
fn rate_text(per_second: f64) -> String {
    let whole = if per_second.is_finite() && per_second > 0.0 {
        per_second.round() as u64
    } else {
        0
    };
    let mut text = String::new();
    let _ = write!(text, "{whole}/s");
    text
}

#[cfg(test)]
mod tests {
    use std::io;
    use std::sync::{Arc, Mutex};

    use indicatif::{ProgressBar, ProgressDrawTarget, TermLike};

    /// An 80-column terminal that keeps what is drawn on it.
    #[derive(Debug, Clone, Default)]
    struct Terminal80 {
        lines: Arc<Mutex<Vec<String>>>,
    }

    impl Terminal80 {
        fn record(&self, s: &str) -> io::Result<()> {
            self.lines.lock().expect("lines").push(s.to_owned());
            Ok(())
        }
    }

    impl TermLike for Terminal80 {
        fn width(&self) -> u16 {
            80
        }
        fn move_cursor_up(&self, _: usize) -> io::Result<()> {
            Ok(())
        }
        fn move_cursor_down(&self, _: usize) -> io::Result<()> {
            Ok(())
        }
        fn move_cursor_right(&self, _: usize) -> io::Result<()> {
            Ok(())
        }
        fn move_cursor_left(&self, _: usize) -> io::Result<()> {
            Ok(())
        }
        fn write_line(&self, s: &str) -> io::Result<()> {
            self.record(s)
        }
        fn write_str(&self, s: &str) -> io::Result<()> {
            self.record(s)
        }
        fn clear_line(&self) -> io::Result<()> {
            Ok(())
        }
        fn flush(&self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn rates_are_whole_events_per_second() {
        assert_eq!(super::rate_text(90_803.564_7), "90804/s");
        assert_eq!(super::rate_text(0.0), "0/s");
        assert_eq!(super::rate_text(f64::INFINITY), "0/s");
        assert_eq!(super::rate_text(f64::NAN), "0/s");
    }

    #[test]
    fn the_bar_fits_80_columns_at_millions_of_events() {
        let terminal = Terminal80::default();
        let bar = ProgressBar::with_draw_target(
            Some(0),
            ProgressDrawTarget::term_like(Box::new(terminal.clone())),
        );
        bar.set_style(super::rebuild_style());
        bar.set_length(12_345_678);
        bar.set_position(9_876_543);
        bar.abandon();
        let lines = terminal.lines.lock().expect("lines");
        // The last drawing is the finished bar (an earlier one may show the length only).
        let line = lines
            .iter()
            .rev()
            .find(|l| l.contains("rebuilding"))
            .unwrap_or_else(|| panic!("nothing drawn: {lines:?}"));
        assert!(line.chars().count() <= 80, "{} columns: {line}", line.len());
        assert!(line.contains("9876543/12345678 events"), "{line}");
        let rate = line.split(", ").nth(1).unwrap_or_default();
        assert!(
            rate.ends_with("/s") && rate.trim_end_matches("/s").parse::<u64>().is_ok(),
            "an integer rate: {line}"
        );
    }
}
