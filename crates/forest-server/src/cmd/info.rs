//! INFO [section ...] (the text is built by [`crate::info`]).

use super::{Ctx, Reply};
use crate::frame::Frame;

pub fn info(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let names: Vec<String> = argv[1..]
        .iter()
        .map(|n| String::from_utf8_lossy(n).to_ascii_lowercase())
        .collect();
    Ok(Frame::Verbatim {
        format: *b"txt",
        text: crate::info::render(ctx.shared, &names).into_bytes(),
    })
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use crate::frame::Frame;

    fn info(h: &mut Harness, args: &[&str]) -> String {
        let mut argv = vec!["INFO"];
        argv.extend_from_slice(args);
        let Frame::Verbatim { text, .. } = h.run(&argv) else {
            panic!("text expected");
        };
        String::from_utf8(text).expect("utf8")
    }

    // Goal: INFO has every section, one section alone, and the keyspace line.
    // Method: INFO with no argument, with `keyspace`, with `forest`.
    #[test]
    fn sections() {
        let mut h = Harness::new();
        h.run(&["SET", "a", "1"]);
        let all = info(&mut h, &[]);
        for header in [
            "# Server",
            "# Clients",
            "# Memory",
            "# Persistence",
            "# Stats",
            "# Keyspace",
            "# Forest",
        ] {
            assert!(all.contains(header), "{header} missing in {all}");
        }
        let keyspace = info(&mut h, &["KEYSPACE"]);
        assert_eq!(keyspace, "# Keyspace\r\ndb0:keys=1,expires=0,avg_ttl=0\r\n");
        let forest = info(&mut h, &["forest"]);
        let engine = format!("engine:{}\r\n", forest_store::ENGINE_DEFAULT);
        assert!(forest.contains(&engine), "{forest}");
        assert_eq!(info(&mut h, &["nosuchsection"]), "");
    }
}
