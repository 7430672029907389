//! `Error`'s accessors on errors the library really raises: what kind, which line, which
//! byte, which choice and which upstream, without matching variants.

use choicewise_core::{Completions, ErrorKind, Source};

async fn outcome_of(sse: &str) -> choicewise_core::Error {
    let completions = Completions::new(Source::reader(std::io::Cursor::new(sse.to_string())));
    let _ = completions.collect().await;
    completions.outcome().await.unwrap_err()
}

#[tokio::test]
async fn stream_level_errors_name_their_kind_line_and_offset() {
    let first = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\n";
    let cases: Vec<(String, ErrorKind, Option<u64>, Option<u64>)> = vec![
        (
            format!("{first}data: [1, 2]\n\n"),
            ErrorKind::Chunk,
            Some(3),
            Some(first.len() as u64),
        ),
        (
            format!("{first}data: {{\"choices\":[{{\"index\":-3,\"delta\":{{}}}}]}}\n\n"),
            ErrorKind::Chunk,
            Some(3),
            None,
        ),
        (
            format!("{first}data: {{\"error\":{{\"message\":\"overloaded\"}}}}\n\n"),
            ErrorKind::Upstream,
            Some(3),
            None,
        ),
        (
            format!("{first}data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"b\"}}"),
            ErrorKind::Truncated,
            Some(3),
            Some(first.len() as u64),
        ),
        (
            format!("{first}data: \u{FFFD}\n\n").replace('\u{FFFD}', "\u{1}"),
            ErrorKind::Chunk,
            Some(3),
            Some(first.len() as u64),
        ),
    ];
    for (sse, kind, line, offset) in cases {
        let e = outcome_of(&sse).await;
        assert_eq!(
            (e.kind(), e.line(), e.offset()),
            (kind, line, offset),
            "{e:?}"
        );
        assert_eq!(e.choice(), None, "{e:?}");
        assert_eq!(e.upstream(), None, "{e:?}");
    }
}

#[tokio::test]
async fn invalid_utf8_is_a_framing_error_at_its_first_bad_byte() {
    let mut bytes = b"data: {\"choices\":[]}\n\ndata: ab".to_vec();
    bytes.extend_from_slice(&[0xff, b'\n', b'\n']);
    let completions = Completions::new(Source::reader(std::io::Cursor::new(bytes)));
    let e = completions.outcome().await.unwrap_err();
    assert_eq!(
        (e.kind(), e.line(), e.offset()),
        (ErrorKind::Framing, Some(3), Some(30))
    );
}

#[tokio::test]
async fn a_choices_own_error_names_the_choice_and_the_others_go_on() {
    let first = "data: {\"choices\":[{\"index\":1,\"delta\":{\"content\":\"ok\"}}]}\n\n";
    let sse = [
        first,
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":5}}]}\n\n",
        "data: {\"choices\":[{\"index\":1,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
        "data: [DONE]\n\n",
    ]
    .concat();
    let completions = Completions::new(Source::reader(std::io::Cursor::new(sse)));
    let errors = completions.choice_errors().await;
    assert_eq!(errors.len(), 1);
    let (index, e) = &errors[0];
    assert_eq!(*index, 0);
    assert_eq!(
        (e.kind(), e.choice(), e.line(), e.offset()),
        (
            ErrorKind::Update,
            Some(0),
            Some(3),
            Some(first.len() as u64)
        )
    );
    assert!(!e.kind().is_retryable());
}

#[tokio::test]
async fn a_fan_out_error_names_its_upstream_and_keeps_the_inner_kind() {
    let ok = "data: {\"choices\":[{\"delta\":{\"content\":\"x\"},\"finish_reason\":\"stop\"}]}\n\n";
    let cut = "data: {\"choices\":[{\"delta\":{\"content\":\"y\"}}]}\n\n";
    let completions = Completions::builder().fan_out([
        Source::reader(ok.as_bytes()).n(1),
        Source::reader(cut.as_bytes()).n(1),
    ]);
    let e = completions.outcome().await.unwrap_err();
    assert_eq!(e.upstream(), Some(1));
    assert_eq!(e.kind(), ErrorKind::Truncated);
    assert_eq!(e.unfinished(), [0]);
    assert_eq!(e.line(), Some(3));
    assert!(e.kind().is_retryable());
}
