import DBus
import FerryCore
import FerrySystem
import XCTest

/// What Ferry makes of NetworkManager's properties (no bus).
final class NetworkManagerStateTests: XCTestCase {
    func testMetered() {
        for (value, metered) in [(0, false), (1, true), (2, false), (3, true), (4, false)] as [(UInt32, Bool)] {
            XCTAssertEqual(NetworkManagerState(metered: value, connectivity: 4).isMetered, metered, "Metered \(value)")
        }
        XCTAssertFalse(NetworkManagerState().isMetered, "unknown: not metered")
    }

    func testConnectivityDecidesOnline() {
        XCTAssertFalse(NetworkManagerState(connectivity: 1, state: 70).isOnline, "NONE is offline whatever State says")
        for c: UInt32 in [2, 3, 4] {
            XCTAssertTrue(NetworkManagerState(connectivity: c, state: 20).isOnline, "Connectivity \(c)")
        }
    }

    func testOnlyAPortalWantsASignIn() {
        XCTAssertEqual(NetworkManagerState(connectivity: 2).conditions, NetworkConditions(metered: false, online: true, portal: true))
        for c: UInt32? in [nil, 0, 1, 3, 4] {
            XCTAssertFalse(NetworkManagerState(connectivity: c, state: 70).conditions.portal, "Connectivity \(c.map(String.init) ?? "unknown")")
        }
    }

    func testStateOnlyWhenConnectivityIsUnknown() {
        for (state, online) in [(0, true), (10, false), (20, false), (30, false), (40, false), (50, true), (60, true), (70, true)] as [(UInt32, Bool)] {
            XCTAssertEqual(NetworkManagerState(connectivity: 0, state: state).isOnline, online, "State \(state)")
            XCTAssertEqual(NetworkManagerState(connectivity: nil, state: state).isOnline, online, "State \(state), no Connectivity")
        }
        XCTAssertTrue(NetworkManagerState().isOnline, "nothing known: online")
    }

    func testUpdateTakesOnlyWhatIsThere() {
        var s = NetworkManagerState(metered: 1, connectivity: 4, state: 70)
        XCTAssertFalse(s.update(from: ["WirelessEnabled": .boolean(true)]))
        XCTAssertEqual(s, NetworkManagerState(metered: 1, connectivity: 4, state: 70))
        XCTAssertTrue(s.update(from: ["Connectivity": .variant(.uint32(1))]))
        XCTAssertEqual(s.conditions, NetworkConditions(metered: true, online: false))
        XCTAssertTrue(s.update(from: ["Metered": .uint32(4), "Connectivity": .uint32(4)]))
        XCTAssertEqual(s.conditions, .assumed)
        // A value of the wrong type is unknown.
        XCTAssertTrue(s.update(from: ["Metered": .string("yes")]))
        XCTAssertNil(s.metered)
    }

    /// The route is the primary connection's path; `/` (none) and a value of the wrong
    /// type are no route.
    func testPrimaryConnectionIsTheRoute() {
        var s = NetworkManagerState(connectivity: 4)
        XCTAssertNil(s.conditions.route)
        XCTAssertTrue(s.update(from: ["PrimaryConnection": .variant(.objectPath("/org/freedesktop/NetworkManager/ActiveConnection/3"))]))
        XCTAssertEqual(s.conditions, NetworkConditions(metered: false, online: true, route: "/org/freedesktop/NetworkManager/ActiveConnection/3"))
        XCTAssertTrue(s.update(from: ["PrimaryConnection": .objectPath("/")]))
        XCTAssertNil(s.conditions.route)
        XCTAssertTrue(s.update(from: ["PrimaryConnection": .string("/org/freedesktop/NetworkManager/ActiveConnection/3")]))
        XCTAssertNil(s.conditions.route)
    }
}
