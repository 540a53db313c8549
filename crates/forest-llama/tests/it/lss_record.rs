//! Fuzz-style property tests of the LSS record decoder (STYLE.md §5 "Fuzz each decoder"):
//! arbitrary bytes never panic, records round-trip, and damage never decodes as valid.
#![cfg(not(loom))]

use forest_llama::lss::record::{self, DecodeError, RecordHeader, RecordKind, RECORD_HEADER_BYTES};
use forest_llama::lss::segment;
use forest_llama::lss::LssAddress;
use proptest::prelude::*;

fn header_strategy() -> impl Strategy<Value = RecordHeader> {
    (
        0..RecordKind::ALL.len(),
        any::<u64>(),
        any::<u64>(),
        any::<u64>(),
        proptest::option::of(0..(1u64 << 61)),
        any::<bool>(),
    )
        .prop_map(|(kind, pid, a, b, prev, archive)| RecordHeader {
            kind: RecordKind::ALL[kind],
            pid,
            lsn_low: a.min(b),
            lsn_high: a.max(b),
            prev: prev.map(|offset| {
                if archive {
                    LssAddress::archive(offset)
                } else {
                    LssAddress::current(offset)
                }
            }),
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(500))]

    // Goal: the decoder never panics and never reads past its input; whatever it accepts
    // re-encodes to the same bytes. Method: arbitrary bytes at an arbitrary address.
    #[test]
    fn arbitrary_bytes_never_panic(
        bytes in proptest::collection::vec(any::<u8>(), 0..400),
        offset in 0..(1u64 << 61),
    ) {
        let address = LssAddress::current(offset);
        if let Ok(found) = record::decode(address, &bytes) {
            let again = record::encode(address, &found.header, found.payload);
            prop_assert_eq!(&again[..], &bytes[..found.len()]);
        }
        let _ = segment::decode_header(&bytes);
    }

    // Goal: arbitrary bytes behind a valid-looking header (right length, any checksum) are
    // refused unless the checksum matches. Method: a header with a plausible length field
    // over random bytes.
    #[test]
    fn plausible_lengths_over_random_bytes_are_refused(
        mut bytes in proptest::collection::vec(any::<u8>(), RECORD_HEADER_BYTES..300),
        offset in 0..(1u64 << 40),
    ) {
        let payload = (bytes.len() - RECORD_HEADER_BYTES) as u32;
        bytes[8..12].copy_from_slice(&payload.to_le_bytes());
        match record::decode(LssAddress::current(offset), &bytes) {
            Ok(found) => {
                let again = record::encode(LssAddress::current(offset), &found.header, found.payload);
                prop_assert_eq!(again, bytes);
            }
            Err(e) => {
                let torn = matches!(e, DecodeError::Torn { .. });
                prop_assert!(!torn, "the length fits, yet: {:?}", e);
            }
        }
    }

    // Goal: a record round-trips, and every single-bit flip or cut of it is refused (crc32c
    // catches every one-bit error). Method: encode an arbitrary record, flip each bit of a
    // sample and cut at each length.
    #[test]
    fn records_round_trip_and_damage_is_refused(
        header in header_strategy(),
        payload in proptest::collection::vec(any::<u8>(), 0..64),
        offset in 0..(1u64 << 61),
    ) {
        let address = LssAddress::current(offset);
        let bytes = record::encode(address, &header, &payload);
        let found = record::decode(address, &bytes).unwrap();
        prop_assert_eq!(found.header, header);
        prop_assert_eq!(found.payload, &payload[..]);
        for bit in 0..bytes.len() * 8 {
            let mut flipped = bytes.clone();
            flipped[bit / 8] ^= 1 << (bit % 8);
            prop_assert!(record::decode(address, &flipped).is_err(), "bit {}", bit);
        }
        for len in 0..bytes.len() {
            prop_assert!(record::decode(address, &bytes[..len]).is_err(), "cut at {}", len);
        }
    }
}
