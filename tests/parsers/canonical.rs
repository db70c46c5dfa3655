//! Canonical JSON (`idempotency::canonical`) and the fingerprints built on it.

use http::{HeaderValue, Method, Uri};
use idemgate::idempotency::canonical::{canonicalize, MAX_DEPTH};
use idemgate::idempotency::Fingerprint;
use proptest::prelude::*;

use crate::cases;
use crate::json::{canonical, document, members, mutate, render, text, Json, Style};

fn canon(s: &str) -> Option<String> {
    canonicalize(s.as_bytes()).map(|c| String::from_utf8(c).unwrap())
}

fn fp(body: &str) -> Fingerprint {
    let json = HeaderValue::from_static("application/json");
    let uri = Uri::from_static("/v1/payments");
    Fingerprint::new(
        &Default::default(),
        &Method::POST,
        &uri,
        &http::HeaderMap::from_iter([(http::header::CONTENT_TYPE, json)]),
        body.as_bytes(),
    )
}

fn styled(j: &Json, style: &[u8]) -> String {
    render(j, &mut Style::new(style), true)
}

fn style() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 1..48)
}

/// An object with one key twice (values `a` and `b`) among other members, possibly
/// nested: (the document, the same keeping only the first, only the second).
fn repeated() -> impl Strategy<Value = (Json, Json, Json)> {
    let parts = (members(document()), text(), document(), document());
    (parts, any::<prop::sample::Index>(), 0..3usize).prop_map(|((others, key, a, b), at, nest)| {
        let others: Vec<(String, Json)> = others.into_iter().filter(|m| m.0 != key).collect();
        let i = at.index(others.len() + 1);
        let build = |pair: &[Json]| {
            let mut m = others.clone();
            for (n, v) in pair.iter().enumerate() {
                m.insert((i + n).min(m.len()), (key.clone(), v.clone()));
            }
            match nest {
                0 => Json::Obj(m),
                1 => Json::Arr(vec![Json::Null, Json::Obj(m)]),
                _ => Json::Obj(vec![("outer".into(), Json::Obj(m))]),
            }
        };
        let both = build(&[a.clone(), b.clone()]);
        (both, build(&[a]), build(&[b]))
    })
}

proptest! {
    #![proptest_config(cases(256))]

    #[test]
    fn every_rendering_reduces_to_the_one_canonical_text(j in document(), s in style()) {
        prop_assert_eq!(canon(&styled(&j, &s)), Some(canonical(&j)));
    }

    #[test]
    fn canonicalisation_is_idempotent(j in document(), s in style()) {
        let once = canon(&styled(&j, &s)).unwrap();
        prop_assert_eq!(canon(&once), Some(once.clone()));
    }

    #[test]
    fn key_order_whitespace_and_escapes_share_a_fingerprint(
        j in document(), a in style(), b in style(),
    ) {
        prop_assert_eq!(fp(&styled(&j, &a)), fp(&styled(&j, &b)));
    }

    #[test]
    fn documents_that_differ_in_any_value_never_share_a_fingerprint(
        j in document(), at in any::<usize>(), how in any::<usize>(), a in style(), b in style(),
    ) {
        let other = mutate(&j, at, how);
        prop_assert_ne!(canonical(&j), canonical(&other), "the mutation changed nothing");
        prop_assert_ne!(fp(&styled(&j, &a)), fp(&styled(&other, &b)));
    }

    #[test]
    fn numbers_beyond_64_bits_keep_every_digit(
        digits in "[1-9][0-9]{19,60}", frac in "(\\.[0-9]{1,30})?", at in any::<prop::sample::Index>(),
        by in 1u8..10,
    ) {
        let n = format!("{digits}{frac}");
        let i = at.index(n.len());
        prop_assume!(n.as_bytes()[i] != b'.');
        let mut other = n.clone().into_bytes();
        other[i] = b'0' + (other[i] - b'0' + by) % 10;
        prop_assume!(i > 0 || other[0] != b'0');
        let other = String::from_utf8(other).unwrap();
        prop_assert_ne!(fp(&format!("{{\"amount\":{n}}}")), fp(&format!("{{\"amount\":{other}}}")));
        prop_assert_ne!(fp(&format!("[{n}]")), fp(&format!("[{other}]")));
    }

    #[test]
    fn a_repeated_key_has_no_canonical_form_and_its_own_fingerprint(
        (both, first, second) in repeated(), a in style(), b in style(),
    ) {
        let text = styled(&both, &a);
        prop_assert_eq!(canon(&text), None);
        prop_assert_ne!(fp(&text), fp(&styled(&first, &b)));
        prop_assert_ne!(fp(&text), fp(&styled(&second, &b)));
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        if let Some(c) = canonicalize(&bytes) {
            prop_assert_eq!(canonicalize(&c), Some(c.clone()));
        }
    }

    #[test]
    fn token_soup_never_panics_and_only_json_is_accepted(
        tokens in prop::collection::vec(prop::sample::select(TOKENS), 0..40),
    ) {
        let input = tokens.concat();
        if let Some(c) = canonicalize(input.as_bytes()) {
            prop_assert!(serde_json::from_str::<serde_json::Value>(&input).is_ok(), "{input:?}");
            prop_assert_eq!(canonicalize(&c), Some(c.clone()));
        }
    }

    #[test]
    fn nesting_is_canonical_up_to_max_depth(levels in 1..MAX_DEPTH + 8, object in any::<bool>()) {
        let (open, close) = if object { ("{\"a\":", "}") } else { ("[", "]") };
        let doc = format!("{}0{}", open.repeat(levels), close.repeat(levels));
        prop_assert_eq!(canon(&doc).is_some(), levels <= MAX_DEPTH);
    }
}

/// Pieces of JSON and of almost-JSON, for inputs that get deep into the parser.
const TOKENS: &[&str] = &[
    "{",
    "}",
    "[",
    "]",
    ",",
    ":",
    " ",
    "\n",
    "\"a\"",
    "\"b\"",
    "\"\\u0061\"",
    "\"\\\"",
    "\"",
    "\\",
    "\\u",
    "\"\\ud800\"",
    "\"\\ud83d\\ude00\"",
    "1",
    "-",
    "0",
    ".5",
    "e",
    "E+7",
    "01",
    "true",
    "tru",
    "null",
    "false",
    "\u{e9}",
    "\0",
    "\u{7f}",
    "\t",
];
