//! The configuration loader (`Config::from_toml`, and `redact_url`) on arbitrary text.
//! Properties: never panics; an accepted configuration renders (`to_redacted_toml`),
//! and, when nothing had to be redacted (no `***`: redacting changes values on
//! purpose), that rendering loads again and renders the same; `redact_url` never panics
//! and never shows a URL's password.
#![no_main]

use idemgate::config::{redact_url, Config};
use idemgate::fuzzing::RouteTable;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let redacted = redact_url(text);
    let base = text.split('?').next().unwrap_or_default();
    let url = base.split_once("://").filter(|(scheme, _)| {
        scheme.starts_with(|c: char| c.is_ascii_alphabetic())
            && (scheme.chars()).all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
    });
    if let Some((_, rest)) = url {
        if let Some((userinfo, _)) = rest.rsplit_once('@') {
            if let Some((_, password)) = userinfo.split_once(':') {
                // Shown fewer times than written (it may also be part of the user name).
                if password.len() >= 4 && !password.contains('*') {
                    let (written, shown) = (text.matches(password), redacted.matches(password));
                    assert!(shown.count() < written.count(), "{redacted}");
                }
            }
        }
    }
    // Files named in a configuration are read while it loads (key files): keep the
    // fuzzer away from device and kernel files.
    if ["/dev", "/proc", "/sys"].iter().any(|p| text.contains(p)) {
        return;
    }
    let Ok(config) = Config::from_toml(text) else {
        return;
    };
    let _ = config.longest_ttl();
    let _ = RouteTable::new(&config);
    let rendered = config.to_redacted_toml();
    if !rendered.contains("***") {
        let again = Config::from_toml(&rendered)
            .unwrap_or_else(|e| panic!("the rendering does not load: {e}\n{rendered}"));
        assert_eq!(again.to_redacted_toml(), rendered);
    }
});
