// `sqlx::migrate!` embeds the views' migration files at compile time; without this, a new
// migration would not rebuild this crate and its tables would never appear.
fn main() {
    println!("cargo:rerun-if-changed=../migrations");
}
