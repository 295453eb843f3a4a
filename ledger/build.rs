// `sqlx::migrate!` embeds the migration files at compile time; without this, adding a
// migration (say the views' 0002) does not rebuild the ledger and the new tables never appear.
fn main() {
    println!("cargo:rerun-if-changed=../migrations");
}
