//! Property tests of the RESP parser (issue 6 "Fuzzing"; STYLE.md §5 "Fuzz each decoder"):
//! random and truncated frames never panic, encoded frames round-trip, a truncated frame is
//! incomplete (never an error or another frame), and the server's incremental request
//! decoder finds the same commands however the bytes are split.

use forest_server::frame::{parse, Frame, Limits};
use forest_server::parse::Requests;
use proptest::prelude::*;

/// Text for simple strings and errors: no CR or LF (encoding would replace them).
fn line_text() -> impl Strategy<Value = String> {
    "[ -~]{0,12}"
}

fn leaf() -> impl Strategy<Value = Frame> {
    prop_oneof![
        line_text().prop_map(Frame::Simple),
        line_text().prop_map(Frame::Error),
        any::<i64>().prop_map(Frame::Integer),
        proptest::collection::vec(any::<u8>(), 0..24).prop_map(Frame::Bulk),
        Just(Frame::Null),
        Just(Frame::NullArray),
        any::<f64>()
            .prop_filter("NaN never equals itself", |x| !x.is_nan())
            .prop_map(Frame::Double),
        any::<bool>().prop_map(Frame::Boolean),
        (
            proptest::array::uniform3(any::<u8>()),
            proptest::collection::vec(any::<u8>(), 0..16)
        )
            .prop_map(|(format, text)| Frame::Verbatim { format, text }),
    ]
}

fn frame() -> impl Strategy<Value = Frame> {
    leaf().prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Frame::Array),
            proptest::collection::vec((inner.clone(), inner), 0..4).prop_map(Frame::Map),
        ]
    })
}

fn encoded(frame: &Frame) -> Vec<u8> {
    let mut out = Vec::new();
    frame.encode(&mut out);
    out
}

/// A command as a client sends it: an array of bulk strings.
fn command() -> impl Strategy<Value = Vec<Vec<u8>>> {
    proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..12), 1..5)
}

fn encode_command(args: &[Vec<u8>]) -> Vec<u8> {
    encoded(&Frame::Array(
        args.iter().cloned().map(Frame::Bulk).collect(),
    ))
}

/// Feeds `input` to a decoder in pieces cut at `cuts`, as a connection would.
fn decode_in_pieces(input: &[u8], cuts: &[usize]) -> (Vec<Vec<Vec<u8>>>, bool) {
    let mut requests = Requests::new(Limits::default());
    let mut buf = Vec::new();
    let mut found = Vec::new();
    let mut points: Vec<usize> = cuts.iter().map(|c| c % (input.len() + 1)).collect();
    points.push(input.len());
    points.sort_unstable();
    let mut from = 0;
    for to in points {
        buf.extend_from_slice(&input[from..to]);
        from = to;
        let used = requests.decode(&buf);
        for i in 0..requests.len() {
            let mut argv = Vec::new();
            requests.argv(i, &buf, &mut argv);
            found.push(argv.iter().map(|a| a.to_vec()).collect());
        }
        if requests.error().is_some() {
            return (found, true);
        }
        buf.drain(..used);
    }
    (found, false)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    // Goal: every encoded frame parses back to itself and uses exactly its bytes.
    // Method: random nested frames, encode, parse, compare.
    #[test]
    fn encoded_frames_round_trip(frame in frame()) {
        let bytes = encoded(&frame);
        prop_assert_eq!(parse(&bytes, &Limits::default()), Ok(Some((frame, bytes.len()))));
    }

    // Goal: a truncated frame is incomplete: never an error, never another frame.
    // Method: every strict prefix of a random frame's encoding.
    #[test]
    fn truncated_frames_are_incomplete(frame in frame()) {
        let bytes = encoded(&frame);
        for cut in 0..bytes.len() {
            prop_assert_eq!(parse(&bytes[..cut], &Limits::default()), Ok(None), "cut {}", cut);
        }
    }

    // Goal: arbitrary bytes never panic the parser, and a parsed frame never claims more
    // bytes than there are. Method: random byte strings, biased toward RESP type bytes.
    #[test]
    fn random_bytes_never_panic(
        bytes in proptest::collection::vec(
            prop_oneof![
                4 => any::<u8>(),
                1 => prop::sample::select(b"*$+-:_,#=%~\r\n0123456789".to_vec()),
            ],
            0..64,
        )
    ) {
        if let Ok(Some((_, used))) = parse(&bytes, &Limits::default()) {
            prop_assert!(used <= bytes.len() && used > 0);
        }
        decode_in_pieces(&bytes, &[bytes.len() / 2]);
    }

    // Goal: corrupting one byte of a valid frame never panics the parser.
    // Method: random frame, overwrite one byte with a random one, parse every prefix.
    #[test]
    fn mutated_frames_never_panic(frame in frame(), at in any::<usize>(), byte in any::<u8>()) {
        let mut bytes = encoded(&frame);
        let at = at % bytes.len();
        bytes[at] = byte;
        for cut in 0..=bytes.len() {
            let _ = parse(&bytes[..cut], &Limits::default());
        }
    }

    // Goal: the server's decoder finds the same commands however the stream is split.
    // Method: a pipeline of random commands, fed whole and in random pieces.
    #[test]
    fn pipelines_decode_the_same_in_pieces(
        commands in proptest::collection::vec(command(), 1..6),
        cuts in proptest::collection::vec(any::<usize>(), 0..8),
    ) {
        let input: Vec<u8> = commands.iter().flat_map(|c| encode_command(c)).collect();
        let (whole, error) = decode_in_pieces(&input, &[]);
        prop_assert!(!error);
        prop_assert_eq!(&whole, &commands);
        let (pieces, error) = decode_in_pieces(&input, &cuts);
        prop_assert!(!error);
        prop_assert_eq!(&pieces, &commands);
    }

    // Goal: the general parser and the server's decoder agree on request frames.
    // Method: parse one encoded command both ways.
    #[test]
    fn parser_and_decoder_agree(args in command()) {
        let bytes = encode_command(&args);
        let Ok(Some((Frame::Array(items), used))) = parse(&bytes, &Limits::default()) else {
            return Err(TestCaseError::fail("array expected"));
        };
        prop_assert_eq!(used, bytes.len());
        let parsed: Vec<Vec<u8>> = items
            .into_iter()
            .map(|f| match f {
                Frame::Bulk(b) => b,
                other => panic!("bulk expected, got {other:?}"),
            })
            .collect();
        prop_assert_eq!(&parsed, &args);
        let (decoded, _) = decode_in_pieces(&bytes, &[]);
        prop_assert_eq!(decoded, vec![args]);
    }
}

// Goal: a frame limit smaller than the input is an error, not a large allocation.
// Method: tight limits, claims above them.
#[test]
fn tight_limits_are_enforced() {
    let limits = Limits {
        bulk_bytes_max: 4,
        array_elements_max: 2,
        inline_bytes_max: 8,
        depth_max: 2,
    };
    assert!(parse(b"$5\r\n", &limits).is_err());
    assert!(parse(b"*3\r\n", &limits).is_err());
    assert!(parse(b"aaaaaaaaaa", &limits).is_err());
    assert!(parse(b"*1\r\n*1\r\n*1\r\n", &limits).is_err());
    assert_eq!(
        parse(b"$4\r\nabcd\r\n", &limits),
        Ok(Some((Frame::bulk("abcd"), 10)))
    );
}
