//! docs/PROTOCOL.md lists every command the server answers (issue 6 "Done when"; STYLE.md
//! §5: style a linter can't see is checked by a test).

use forest_server::cmd::COMMAND_SPECS;

// Goal: no command is answered without being documented.
// Method: every spec's upper-case name appears in a table row or heading of PROTOCOL.md.
#[test]
fn every_command_is_documented() {
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/PROTOCOL.md"
    ))
    .expect("docs/PROTOCOL.md");
    let missing: Vec<&str> = COMMAND_SPECS
        .iter()
        .map(|spec| spec.name)
        .filter(|name| {
            let upper = name.to_ascii_uppercase();
            !doc.lines().any(|line| {
                (line.starts_with('|') || line.starts_with('#'))
                    && (line.contains(&format!("`{upper} "))
                        || line.contains(&format!("`{upper}`"))
                        || line.contains(&format!(" {upper} ")))
            })
        })
        .collect();
    assert!(missing.is_empty(), "not in docs/PROTOCOL.md: {missing:?}");
}
