//! The codes of tonic's own codec refusals (an oversized or undecodable
//! request message), mapped to those of the error table.

use tonic::Status;

/// tonic's codec answers a request message over the size limit with
/// `OUT_OF_RANGE` and one that does not decode with `INTERNAL`, before any
/// handler runs; the error table (`api::error`) says `RESOURCE_EXHAUSTED`
/// (like REST's 413) and `INVALID_ARGUMENT` (like REST's 400). This maps
/// those answers (trailers-only, so the status is in the headers), as a
/// `MapResponse` layer on the admin server. No handler answers
/// `OUT_OF_RANGE`, and handlers' `INTERNAL` says only "internal error", so
/// nothing of theirs is changed.
pub fn codec_status_codes<B>(mut response: http::Response<B>) -> http::Response<B> {
    let Some(status) = Status::from_header_map(response.headers()) else {
        return response;
    };
    let message = status.message();
    let code = match status.code() {
        tonic::Code::OutOfRange => tonic::Code::ResourceExhausted,
        tonic::Code::Internal
            if message.starts_with("failed to decode Protobuf message")
                || message == "Missing request message." =>
        {
            tonic::Code::InvalidArgument
        }
        _ => return response,
    };
    let mapped = Status::new(code, format!("request message refused: {message}"));
    // The message is percent-encoded, so writing the headers cannot fail.
    let _ = mapped.add_header(response.headers_mut());
    response
}
