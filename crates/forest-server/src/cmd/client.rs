//! CLIENT SETNAME, GETNAME, ID, LIST, INFO, SETINFO (what client libraries send on connect
//! and what operators read).

use std::fmt::Write as _;
use std::sync::atomic::Ordering;

use super::{is_word, unknown_subcommand, wrong_arity, Ctx, Reply};
use crate::frame::Frame;
use crate::server::{ClientInfo, Shared};

/// Sets the connection's name: no spaces, newlines or special characters, as Redis.
pub fn set_name(ctx: &mut Ctx<'_, '_>, name: &[u8]) -> Result<(), Frame> {
    if name.iter().any(|&b| !(b'!'..=b'~').contains(&b)) {
        return Err(Frame::err(
            "Client names cannot contain spaces, newlines or special characters.",
        ));
    }
    ctx.client.info.meta.lock().name = String::from_utf8_lossy(name).into_owned();
    Ok(())
}

/// One CLIENT LIST line (without the newline).
fn describe(shared: &Shared, info: &ClientInfo) -> String {
    let meta = info.meta.lock();
    let state = meta.state;
    let now_ms = shared.uptime_ms();
    let idle_ms = now_ms.saturating_sub(info.active_ms.load(Ordering::Relaxed));
    let mut line = String::new();
    let _ = write!(
        line,
        "id={} addr={} laddr={} fd=-1 name={} age={} idle={} flags={} db=0 sub={} psub={} \
         ssub=0 multi={} watch={} qbuf=0 qbuf-free=0 argv-mem=0 multi-mem=0 rbs=0 rbp=0 obl=0 \
         oll=0 omem=0 tot-mem=0 events=r cmd={} user=default redir=-1 resp={} lib-name={} \
         lib-ver={}",
        info.id,
        info.addr,
        info.laddr,
        meta.name,
        info.created.elapsed().as_secs(),
        idle_ms / 1000,
        state.flags(),
        state.sub,
        state.psub,
        state.multi.map_or(-1, |n| n as i64),
        state.watch,
        if meta.last_command.is_empty() {
            "NULL"
        } else {
            meta.last_command
        },
        meta.resp,
        meta.lib_name,
        meta.lib_ver,
    );
    line
}

/// The caller's own line shows its state now, not as of its previous batch.
fn publish_state(ctx: &mut Ctx<'_, '_>) {
    let state = ctx.client.state();
    ctx.client.info.meta.lock().state = state;
}

fn text(text: String) -> Frame {
    Frame::Verbatim {
        format: *b"txt",
        text: text.into_bytes(),
    }
}

pub fn client(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let sub = argv[1];
    let args = &argv[2..];
    if is_word(sub, "setname") {
        let [name] = args else {
            return Err(wrong_arity("client|setname"));
        };
        set_name(ctx, name)?;
        Ok(Frame::ok())
    } else if is_word(sub, "getname") {
        let name = ctx.client.info.meta.lock().name.clone();
        if name.is_empty() {
            Ok(Frame::Null)
        } else {
            Ok(Frame::bulk(name))
        }
    } else if is_word(sub, "id") {
        Ok(Frame::Integer(
            i64::try_from(ctx.client.info.id).unwrap_or(i64::MAX),
        ))
    } else if is_word(sub, "info") {
        publish_state(ctx);
        Ok(text(describe(ctx.shared, &ctx.client.info) + "\n"))
    } else if is_word(sub, "list") {
        publish_state(ctx);
        let mut clients: Vec<_> = ctx.shared.clients.lock().values().cloned().collect();
        clients.sort_by_key(|c| c.id);
        let mut out = String::new();
        for c in clients {
            out.push_str(&describe(ctx.shared, &c));
            out.push('\n');
        }
        Ok(text(out))
    } else if is_word(sub, "unblock") {
        super::blocking::client_unblock(ctx, sub, args)
    } else if is_word(sub, "setinfo") {
        let [attr, value] = args else {
            return Err(wrong_arity("client|setinfo"));
        };
        if value.iter().any(|&b| !(b'!'..=b'~').contains(&b)) {
            return Err(Frame::err(format!(
                "{} cannot contain spaces, newlines or special characters.",
                String::from_utf8_lossy(attr).to_ascii_lowercase()
            )));
        }
        let value = String::from_utf8_lossy(value).into_owned();
        let mut meta = ctx.client.info.meta.lock();
        if is_word(attr, "lib-name") {
            meta.lib_name = value;
        } else if is_word(attr, "lib-ver") {
            meta.lib_ver = value;
        } else {
            return Err(Frame::err(format!(
                "Unrecognized option '{}'",
                String::from_utf8_lossy(attr)
            )));
        }
        Ok(Frame::ok())
    } else {
        Err(unknown_subcommand("client", sub))
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use crate::frame::Frame;

    // Goal: names and library info are kept and shown; bad names refused.
    // Method: set, get, list.
    #[test]
    fn client_commands() {
        let mut h = Harness::new();
        assert_eq!(h.run(&["CLIENT", "GETNAME"]), Frame::Null);
        assert_eq!(h.run(&["CLIENT", "SETNAME", "worker-1"]), Frame::ok());
        assert_eq!(h.run(&["CLIENT", "GETNAME"]), bulk("worker-1"));
        assert!(matches!(
            h.run(&["CLIENT", "SETNAME", "a b"]),
            Frame::Error(_)
        ));
        assert_eq!(
            h.run(&["CLIENT", "SETINFO", "LIB-NAME", "redis-rs"]),
            Frame::ok()
        );
        assert!(matches!(h.run(&["CLIENT", "ID"]), Frame::Integer(n) if n > 0));
        let Frame::Verbatim { text, .. } = h.run(&["CLIENT", "LIST"]) else {
            panic!("text expected");
        };
        let text = String::from_utf8(text).expect("utf8");
        assert!(text.contains("name=worker-1 "), "{text}");
        assert!(text.contains("lib-name=redis-rs"), "{text}");
        assert_eq!(
            h.run(&["CLIENT", "KILL", "x"]),
            Frame::Error("ERR unknown subcommand 'KILL'. Try CLIENT HELP.".into())
        );
        assert_eq!(
            h.run(&["CLIENT", "SETNAME"]),
            Frame::Error("ERR wrong number of arguments for 'client|setname' command".into())
        );
    }
}
