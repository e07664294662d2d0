//! Outgoing mail: the password-reset links a user asks for when the operator set `smtp_url`.
//!
//! Owns: the SMTP transport (lettre over tokio; `smtp://host:port` plain, `?tls=required` or
//! `?tls=opportunistic` for STARTTLS, `smtps://` for TLS; a user and password in the URL log
//! in), the sender (`smtp_from`), and one plain-text message sent per call (with a random
//! `Message-ID` on the sender's domain).
//! Must not: block (it is async I/O on the event loop), decide who gets mail, or log an
//! address's message body (a reset link is a credential).

use std::time::Duration;

use lettre::message::Mailbox;
use lettre::message::header::ContentType;
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};

/// How long one SMTP exchange may take.
const TIMEOUT: Duration = Duration::from_secs(20);

/// Why mail could not be set up or sent.
#[derive(Debug, thiserror::Error)]
pub enum MailError {
    #[error("smtp_url: {0}")]
    Url(String),
    #[error("smtp_from: {0}")]
    From(String),
    #[error("recipient {0:?} is not an address")]
    To(String),
    #[error("building the message: {0}")]
    Build(String),
    #[error("sending: {0}")]
    Send(String),
}

/// An SMTP relay and the sender's address.
pub struct Mailer {
    transport: AsyncSmtpTransport<Tokio1Executor>,
    from: Mailbox,
}

impl Mailer {
    /// The mailer of `smtp_url` (its password, if any, is never printed) sending as `from`.
    pub fn new(smtp_url: &str, from: &str) -> Result<Mailer, MailError> {
        let transport = AsyncSmtpTransport::<Tokio1Executor>::from_url(smtp_url)
            .map_err(|e| MailError::Url(e.to_string()))?
            .timeout(Some(TIMEOUT))
            .build();
        let from = from
            .parse::<Mailbox>()
            .map_err(|e| MailError::From(e.to_string()))?;
        Ok(Mailer { transport, from })
    }

    /// Sends one plain-text message.
    pub async fn send(&self, to: &str, subject: &str, body: String) -> Result<(), MailError> {
        let to = to
            .parse::<Mailbox>()
            .map_err(|_| MailError::To(to.to_string()))?;
        // A Message-ID of our own (random, on the sender's domain): relays and spam filters
        // look for one.
        let id = format!(
            "<{}@{}>",
            hex::encode(rand::random::<[u8; 16]>()),
            self.from.email.domain()
        );
        let message = Message::builder()
            .message_id(Some(id))
            .from(self.from.clone())
            .to(to)
            .subject(subject)
            .header(ContentType::TEXT_PLAIN)
            .body(body)
            .map_err(|e| MailError::Build(e.to_string()))?;
        self.transport
            .send(message)
            .await
            .map_err(|e| MailError::Send(e.to_string()))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_and_senders_are_checked() {
        assert!(Mailer::new("smtp://127.0.0.1:2525", "shoal <noreply@example.org>").is_ok());
        assert!(Mailer::new("smtp://mail.example.org?tls=required", "a@example.org").is_ok());
        assert!(matches!(
            Mailer::new("http://example.org", "a@example.org"),
            Err(MailError::Url(_))
        ));
        assert!(matches!(
            Mailer::new("smtp://127.0.0.1:2525", "not an address"),
            Err(MailError::From(_))
        ));
    }
}
