def pytest_configure(config):
    config.addinivalue_line("markers", "slow: a doc whose blocks take more than about half a minute")
