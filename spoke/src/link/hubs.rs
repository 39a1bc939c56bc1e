//! Which hub address the link dials next (pure: no I/O).
//!
//! A spoke may know several hub replicas (`--hub-url a,b,c`). It starts at
//! a random one, so spokes restarted together spread over the replicas,
//! and moves to the next after every failed dial or lost session, so a
//! dead replica costs one attempt, not a stuck spoke. A hub may name the
//! address to use next (`GoAway.redirect_url`, balancing after a replica
//! joins): one of the spoke's own addresses is simply jumped to; an
//! address it does not know is dialed once (with the TLS name and proxy of
//! the address it came from: one serving identity for every replica), and
//! when that fails the spoke goes back to its own list.

use rustls::pki_types::ServerName;

use super::tls::HubAddress;

/// Where a redirect points, once accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Redirect {
    /// One of the configured addresses (its position in the list).
    Known(usize),
    /// An address the spoke was not given: dialed once.
    Unknown,
}

/// The rotation over the configured hub addresses.
#[derive(Debug, Clone)]
pub struct Hubs {
    list: Vec<HubAddress>,
    /// The configured address in use (or last used).
    at: usize,
    /// A redirect target outside the list, dialed once.
    redirect: Option<HubAddress>,
    /// The TLS name every address is checked against, when set
    /// (`--hub-server-name`); else each address's own host.
    server_name: Option<ServerName<'static>>,
}

impl Hubs {
    /// A rotation over `list` (at least one address) starting at
    /// `start % list.len()`.
    pub fn new(list: Vec<HubAddress>, start: usize) -> Self {
        assert!(!list.is_empty(), "a spoke needs at least one hub address");
        let at = start % list.len();
        Self {
            list,
            at,
            redirect: None,
            server_name: None,
        }
    }

    /// As [`Hubs::new`], starting at a random address (spreads spokes
    /// that restart together).
    pub fn random_start(list: Vec<HubAddress>) -> Self {
        let start = rand::random::<u32>() as usize;
        Self::new(list, start)
    }

    /// Checks TLS against `name` on redirect targets too (the configured
    /// addresses carry it already).
    pub fn with_server_name(mut self, name: Option<ServerName<'static>>) -> Self {
        self.server_name = name;
        self
    }

    /// The configured addresses.
    pub fn list(&self) -> &[HubAddress] {
        &self.list
    }

    /// The address to dial now.
    pub fn current(&self) -> &HubAddress {
        self.redirect.as_ref().unwrap_or(&self.list[self.at])
    }

    /// The attempt or session on [`Hubs::current`] failed or ended: the
    /// next goes to the next configured address. A redirect target outside
    /// the list is not tried again: back to the list, past the address
    /// that sent the redirect.
    pub fn advance(&mut self) {
        self.redirect = None;
        self.at = (self.at + 1) % self.list.len();
    }

    /// The hub said to reconnect to `url` next. Refused (the rotation
    /// unchanged) when `url` is not an `https://host:port` link address.
    pub fn redirect(&mut self, url: &str) -> Result<Redirect, String> {
        let parsed = HubAddress::parse(url)?;
        if let Some(i) = self
            .list
            .iter()
            .position(|a| a.authority == parsed.authority)
        {
            self.redirect = None;
            self.at = i;
            return Ok(Redirect::Known(i));
        }
        let from = &self.list[self.at];
        let mut target = parsed;
        target.proxy = from.proxy.clone();
        if let Some(name) = &self.server_name {
            target = target.with_server_name(name.clone());
        }
        self.redirect = Some(target);
        Ok(Redirect::Unknown)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hubs(urls: &str, start: usize) -> Hubs {
        Hubs::new(HubAddress::parse_list(urls).unwrap(), start)
    }

    fn at(h: &Hubs) -> String {
        h.current().url()
    }

    #[test]
    fn each_failure_moves_to_the_next_address_round_the_list() {
        let mut h = hubs("https://a:1,https://b:2,https://c:3", 4);
        assert_eq!(at(&h), "https://b:2", "start 4 of 3 is the second");
        h.advance();
        assert_eq!(at(&h), "https://c:3");
        h.advance();
        assert_eq!(at(&h), "https://a:1");
        let mut one = hubs("https://only:1", 0);
        one.advance();
        assert_eq!(at(&one), "https://only:1");
    }

    #[test]
    fn random_starts_spread_over_the_list() {
        let list = HubAddress::parse_list("https://a:1,https://b:2,https://c:3").unwrap();
        let mut seen = std::collections::HashSet::new();
        for _ in 0..200 {
            seen.insert(at(&Hubs::random_start(list.clone())));
        }
        assert_eq!(seen.len(), 3, "{seen:?}");
    }

    #[test]
    fn a_redirect_to_a_known_address_jumps_to_it() {
        let mut h = hubs("https://a:1,https://b:2,https://c:3", 0);
        assert_eq!(h.redirect("https://c:3/"), Ok(Redirect::Known(2)));
        assert_eq!(at(&h), "https://c:3");
        // Lost later: the list goes on from there.
        h.advance();
        assert_eq!(at(&h), "https://a:1");
    }

    #[test]
    fn an_unknown_redirect_is_dialed_once_then_the_list_again() {
        let mut h = hubs("https://a:1,https://b:2", 0);
        assert_eq!(h.redirect("https://d:4"), Ok(Redirect::Unknown));
        assert_eq!(at(&h), "https://d:4");
        // Its TLS name is its own host unless one name is configured.
        assert_eq!(
            h.current().server_name,
            ServerName::try_from("d").unwrap().to_owned()
        );
        h.advance();
        assert_eq!(at(&h), "https://b:2", "past the address that redirected");
        h.advance();
        assert_eq!(at(&h), "https://a:1");
    }

    #[test]
    fn an_unknown_redirect_keeps_the_configured_tls_name() {
        let name = ServerName::try_from("hub.clawfed.svc").unwrap().to_owned();
        let mut h = hubs("https://a:1", 0).with_server_name(Some(name.clone()));
        h.redirect("https://198.18.0.9:8443").unwrap();
        assert_eq!(h.current().server_name, name);
    }

    #[test]
    fn a_malformed_redirect_changes_nothing() {
        let mut h = hubs("https://a:1,https://b:2", 1);
        for bad in ["http://d:4", "https://d", "d:4", "", "https://d:4/path"] {
            assert!(h.redirect(bad).is_err(), "{bad:?} accepted");
            assert_eq!(at(&h), "https://b:2");
        }
    }
}
