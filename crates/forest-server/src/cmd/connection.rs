//! Connection commands: PING, ECHO, HELLO, AUTH, SELECT, QUIT (docs/PROTOCOL.md
//! "Connection").

use super::{int_arg, is_word, After, Ctx, Reply};
use crate::frame::{Frame, Protocol};

pub fn ping(_ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    match argv {
        [_] => Ok(Frame::Simple("PONG".into())),
        [_, message] => Ok(Frame::bulk(*message)),
        _ => Err(super::wrong_arity("ping")),
    }
}

pub fn echo(_ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    Ok(Frame::bulk(argv[1]))
}

/// Checks a password against `--requirepass` (user `default` only, as Redis without ACLs).
fn check_password(ctx: &mut Ctx<'_, '_>, user: &[u8], pass: &[u8]) -> Result<(), Frame> {
    let ok = match &ctx.shared.config.requirepass {
        Some(want) => user == b"default" && pass == want.as_bytes(),
        None => user == b"default",
    };
    if ok {
        ctx.client.authenticated = true;
        Ok(())
    } else {
        Err(Frame::Error(
            "WRONGPASS invalid username-password pair or user is disabled.".into(),
        ))
    }
}

/// AUTH [user] pass.
pub fn auth(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let (user, pass): (&[u8], &[u8]) = match argv {
        [_, pass] => (b"default", pass),
        [_, user, pass] => (user, pass),
        _ => return Err(super::syntax_error()),
    };
    if ctx.shared.config.requirepass.is_none() && argv.len() == 2 {
        return Err(Frame::err(
            "AUTH <password> called without any password configured for the default user. \
             Are you sure your configuration is correct?",
        ));
    }
    check_password(ctx, user, pass)?;
    Ok(Frame::ok())
}

/// HELLO [protover [AUTH user pass] [SETNAME name]].
pub fn hello(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let mut protocol = ctx.client.protocol;
    if let Some(version) = argv.get(1) {
        protocol = match crate::parse::parse_int(version) {
            Some(2) => Protocol::Resp2,
            Some(3) => Protocol::Resp3,
            Some(_) => {
                return Err(Frame::Error("NOPROTO unsupported protocol version".into()));
            }
            None => {
                return Err(Frame::err(
                    "Protocol version is not an integer or out of range",
                ))
            }
        };
    }
    let mut auth = None;
    let mut name = None;
    let mut i = 2;
    while i < argv.len() {
        if is_word(argv[i], "auth") && i + 2 < argv.len() {
            auth = Some((argv[i + 1], argv[i + 2]));
            i += 3;
        } else if is_word(argv[i], "setname") && i + 1 < argv.len() {
            name = Some(argv[i + 1]);
            i += 2;
        } else {
            return Err(Frame::err(format!(
                "Syntax error in HELLO option '{}'",
                String::from_utf8_lossy(argv[i])
            )));
        }
    }
    if let Some((user, pass)) = auth {
        check_password(ctx, user, pass)?;
    }
    if !ctx.client.authenticated {
        return Err(Frame::Error(
            "NOAUTH HELLO must be called with the client already authenticated, otherwise the \
             HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client \
             and select the RESP protocol version at the same time"
                .into(),
        ));
    }
    if let Some(name) = name {
        super::client::set_name(ctx, name)?;
    }
    ctx.client.protocol = protocol;
    ctx.client.info.meta.lock().resp = if protocol == Protocol::Resp3 { 3 } else { 2 };
    let text = |s: &str| Frame::bulk(s.as_bytes());
    Ok(Frame::Map(vec![
        (text("server"), text("forest")),
        (text("version"), text(env!("CARGO_PKG_VERSION"))),
        (
            text("proto"),
            Frame::Integer(if protocol == Protocol::Resp3 { 3 } else { 2 }),
        ),
        (
            text("id"),
            Frame::Integer(i64::try_from(ctx.client.info.id).unwrap_or(i64::MAX)),
        ),
        (text("mode"), text("standalone")),
        (text("role"), text("master")),
        (text("modules"), Frame::Array(vec![])),
    ]))
}

/// SELECT 0: forest has one database.
pub fn select(_ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    match int_arg(argv[1])? {
        0 => Ok(Frame::ok()),
        _ => Err(Frame::err("DB index is out of range")),
    }
}

pub fn quit(ctx: &mut Ctx<'_, '_>, _argv: &[&[u8]]) -> Reply {
    ctx.after = After::Close;
    Ok(Frame::ok())
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use crate::frame::Frame;

    // Goal: PING, ECHO, SELECT and QUIT answer as Redis does.
    // Method: compare replies.
    #[test]
    fn simple_connection_commands() {
        let mut h = Harness::new();
        assert_eq!(h.run(&["PING"]), Frame::Simple("PONG".into()));
        assert_eq!(h.run(&["ping", "hi"]), bulk("hi"));
        assert_eq!(
            h.run(&["ping", "a", "b"]),
            Frame::Error("ERR wrong number of arguments for 'ping' command".into())
        );
        assert_eq!(h.run(&["ECHO", "x y"]), bulk("x y"));
        assert_eq!(h.run(&["SELECT", "0"]), Frame::ok());
        assert_eq!(
            h.run(&["SELECT", "1"]),
            Frame::Error("ERR DB index is out of range".into())
        );
        assert_eq!(
            h.run(&["SELECT", "x"]),
            Frame::Error("ERR value is not an integer or out of range".into())
        );
        assert_eq!(h.run(&["QUIT"]), Frame::ok());
    }

    // Goal: with --requirepass, only AUTH/HELLO/QUIT run before authentication; wrong
    // passwords and users are refused; HELLO AUTH authenticates.
    // Method: a harness with a password, commands before and after AUTH.
    #[test]
    fn auth_gates_commands() {
        let mut h = Harness::with_config(|c| c.requirepass = Some("secret".into()));
        let noauth = Frame::Error("NOAUTH Authentication required.".into());
        assert_eq!(h.run(&["GET", "k"]), noauth);
        assert_eq!(h.run(&["PING"]), noauth);
        assert!(matches!(h.run(&["HELLO", "3"]), Frame::Error(e) if e.starts_with("NOAUTH")));
        assert!(matches!(h.run(&["AUTH", "nope"]), Frame::Error(e) if e.starts_with("WRONGPASS")));
        assert!(matches!(
            h.run(&["AUTH", "bob", "secret"]),
            Frame::Error(e) if e.starts_with("WRONGPASS")
        ));
        assert_eq!(h.run(&["AUTH", "secret"]), Frame::ok());
        assert_eq!(h.run(&["GET", "k"]), Frame::Null);

        let mut h = Harness::with_config(|c| c.requirepass = Some("secret".into()));
        let Frame::Map(pairs) =
            h.run(&["HELLO", "3", "AUTH", "default", "secret", "SETNAME", "me"])
        else {
            panic!("map expected");
        };
        assert_eq!(pairs[2], (bulk("proto"), Frame::Integer(3)));
        assert_eq!(h.run(&["CLIENT", "GETNAME"]), bulk("me"));

        let mut h = Harness::new();
        assert!(
            matches!(h.run(&["AUTH", "x"]), Frame::Error(e) if e.contains("without any password"))
        );
        assert!(matches!(h.run(&["HELLO", "4"]), Frame::Error(e) if e.starts_with("NOPROTO")));
    }
}
